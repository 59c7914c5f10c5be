-- rejections_by_rid: per prefill leg (node, rid), the scheduler's placeholder-path rejection: prompt tokens, limit in force, first line.
-- reads: engine_rejections
-- stored as: view
--
-- SGLang's scheduler logs 'Input length (N tokens) exceeds the maximum allowed length (L tokens)'
-- with the request's rid when it swaps the prompt for the 1-token placeholder (kind input_length).
-- One row per (node, rid): the first such line (ts, file_id, line_no), the largest N and L logged.
-- Lines without a rid cannot be tied to a leg (they still count in the audit, per period).
WITH
grouped AS (
    SELECT r.node, r.rid, min(r.ts) AS ts, max(r.input_tokens) AS input_tokens,
           max(r.limit_tokens) AS limit_tokens,
           min(CAST(r.file_id AS BIGINT) * 10000000000 + r.line_no) AS ref
    FROM engine_rejections r
    WHERE r.kind = 'input_length' AND r.rid IS NOT NULL
    GROUP BY r.node, r.rid
)
SELECT g.node, g.rid, g.ts, g.input_tokens, g.limit_tokens,
       CAST((g.ref - g.ref % 10000000000) / 10000000000 AS INTEGER) AS file_id,
       g.ref % 10000000000 AS line_no
FROM grouped g
