-- gateway_top: the gateway records that report a request: one per logical request and layer, the outermost layer's where several logged it.
-- reads: gateway_requests_unique
-- stored as: table
-- uncompressed: request_id, header_request_id
--
-- Delivery-retry duplicates are already out (gateway_requests_unique). One logical request logged
-- by several front doors (an edge, then a proxy or AI gateway, then the router) shares a logical
-- id, COALESCE(header_request_id, request_id): a record is left out when a more outer layer logged
-- the same logical id (layer_rank: edge 1, router 3, every other layer 2). Records of one request
-- that share no id are folded later, when they matched the same engine chain (chain_matches).
-- Every column of the record, and record_id (1, 2, ... in file and line order: one dense integer
-- that names the record, for joins) and layer_rank. A table: the few records a question needs are found by
-- their key without reading the gateway table again. Its evidence text is record_evidence. The ids
-- are stored uncompressed, as in gateway_requests: nearly unique per row, they barely compress,
-- and compressing them was a third of the cost of building the table (5 M records).
WITH
ranked AS (
    SELECT g.file_id, g.line_no, COALESCE(g.header_request_id, g.request_id) AS logical_id,
           CASE g.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END AS layer_rank
    FROM gateway_requests_unique g
),
shadowed AS (
    -- only a record below the outermost layer can be shadowed: probe with those
    SELECT DISTINCT i.file_id, i.line_no
    FROM ranked i
    JOIN ranked o ON o.logical_id = i.logical_id AND o.layer_rank < i.layer_rank
    WHERE i.layer_rank > 1
),
numbered AS (
    -- the dense number is counted over the keys alone, then joined to the record's columns: one
    -- window over every column sorted (and spilled) a copy of the whole gateway table
    SELECT ROW_NUMBER() OVER (ORDER BY g.file_id, g.line_no) AS record_id, g.file_id, g.line_no
    FROM gateway_requests_unique g
    WHERE NOT EXISTS (SELECT 1 FROM shadowed s WHERE s.file_id = g.file_id AND s.line_no = g.line_no)
)
SELECT n.record_id,
       g.file_id, g.line_no, g.request_id, g.header_request_id, g.tenant_id, g.model, g.layer,
       CASE g.layer WHEN 'edge' THEN 1 WHEN 'router' THEN 3 ELSE 2 END AS layer_rank,
       g.ts_start, g.ts_end, g.status, g.prompt_tokens, g.tokens_source, g.request_bytes,
       g.streamed, g.in_band_error
FROM numbered n
JOIN gateway_requests_unique g ON g.file_id = n.file_id AND g.line_no = n.line_no
