-- request_chains: one row per request as the engines saw it: its prefill leg and its decode leg, paired, with rejection and transfer failure.
-- reads: request_legs, rejections_by_rid, transfer_failures
-- stored as: table
-- uncompressed: header_request_id, prefill_rid, decode_rid
--
-- The pairing rule (the only one): the router sends the same request to one prefill and one decode
-- node with the same bootstrap_room and bootstrap_host (the prefill node's address), and each node
-- makes its own rid, so a prefill leg and a decode leg are one request when their bootstrap_room is
-- equal and their bootstrap_host is too (a leg that did not log its host pairs on the room alone).
-- rids never pair legs. A leg with no partner (its node's log is missing, or it logged no room) is
-- a chain on its own. A leg of a unified node (or of a node whose role is unknown) is the whole
-- request: it is both the prefill and the decode leg (engine_mode 'unified' / 'unknown').
--   chain_id        1, 2, ... in the order of the legs' ids (prefill, then decode)
--   decode_start_ts the decode leg's first record; when that Receive line had no timestamp of its
--                   own (SGLang 0.5.8-0.5.11 request logs: the previous line's time) and the prefill
--                   Receive is later, the prefill's (the router sends both legs at once)
--   ts_engine       the earlier of the two legs' first records; engine_tokens decode's, else prefill's
--   rejection_*     the scheduler rejection of the prefill leg (rejections_by_rid)
--   transfer_*      the transfer failure logged for the room (transfer_failures)
-- The chain's evidence text is chain_evidence. The ids (header_request_id, the two rids) are stored
-- uncompressed: nearly unique per chain, compressing them costs more than it saves (as request_legs).
WITH
pairs AS (
    -- narrow first: which legs pair (a leg of one role meets at most the legs of its room)
    SELECT p.leg_id AS prefill_leg_id, d.leg_id AS decode_leg_id, 'pd' AS engine_mode
    FROM (SELECT leg_id, bootstrap_room, bootstrap_host FROM request_legs WHERE role = 'prefill') p
    FULL OUTER JOIN (SELECT leg_id, bootstrap_room, bootstrap_host FROM request_legs WHERE role = 'decode') d
      ON p.bootstrap_room = d.bootstrap_room
     AND (p.bootstrap_host IS NULL OR d.bootstrap_host IS NULL OR p.bootstrap_host = d.bootstrap_host)
    UNION ALL
    -- unified (or unknown-role) nodes run prefill and decode in one process: the leg is both
    SELECT leg_id, leg_id, CASE WHEN role = 'unified' THEN 'unified' ELSE 'unknown' END
    FROM request_legs
    WHERE role NOT IN ('prefill', 'decode')
),
numbered AS (
    SELECT ROW_NUMBER() OVER (ORDER BY prefill_leg_id NULLS FIRST, decode_leg_id NULLS FIRST) AS chain_id,
           prefill_leg_id, decode_leg_id, engine_mode
    FROM pairs
),
chains AS (
    SELECT n.chain_id, n.engine_mode, n.prefill_leg_id, n.decode_leg_id,
           COALESCE(p.bootstrap_room, d.bootstrap_room) AS bootstrap_room,
           COALESCE(p.bootstrap_host, d.bootstrap_host) AS bootstrap_host,
           COALESCE(d.header_request_id, p.header_request_id) AS header_request_id,
           p.node AS prefill_node, p.pod AS prefill_pod, p.rid AS prefill_rid, p.tokens AS prefill_tokens,
           p.ts_first AS prefill_ts, p.finish_type AS prefill_finish_type,
           p.received_file_id AS prefill_received_file_id, p.received_line_no AS prefill_received_line_no,
           p.finished_file_id AS prefill_finished_file_id, p.finished_line_no AS prefill_finished_line_no,
           d.node AS decode_node, d.pod AS decode_pod, d.rid AS decode_rid, d.tokens AS decode_tokens,
           CASE WHEN d.received_inferred AND p.ts_received > d.ts_first THEN p.ts_received
                ELSE d.ts_first END AS decode_start_ts,
           d.ts_finished AS decode_finished_ts, d.finished_inferred AS decode_finished_inferred,
           d.finish_type AS decode_finish_type, d.finish_status_code AS decode_finish_status_code,
           d.received_file_id AS decode_received_file_id, d.received_line_no AS decode_received_line_no,
           d.finished_file_id AS decode_finished_file_id, d.finished_line_no AS decode_finished_line_no,
           (COALESCE(p.stream, false) OR COALESCE(d.stream, false)) AS engine_stream,
           (COALESCE(p.aborted, false) OR COALESCE(d.aborted, false)) AS aborted,
           COALESCE(p.abort_message, d.abort_message) AS abort_message,
           CASE WHEN p.abort_file_id IS NOT NULL THEN p.abort_file_id ELSE d.abort_file_id END AS abort_file_id,
           CASE WHEN p.abort_file_id IS NOT NULL THEN p.abort_line_no ELSE d.abort_line_no END AS abort_line_no
    FROM numbered n
    LEFT JOIN request_legs p ON p.leg_id = n.prefill_leg_id
    LEFT JOIN request_legs d ON d.leg_id = n.decode_leg_id
),
joined AS (
    SELECT c.*,
           COALESCE(LEAST(c.prefill_ts, c.decode_start_ts), c.prefill_ts, c.decode_start_ts) AS ts_engine,
           COALESCE(c.decode_tokens, c.prefill_tokens) AS engine_tokens,
           rj.ts AS rejection_ts, rj.input_tokens AS rejected_input_tokens,
           rj.limit_tokens AS rejected_limit_tokens,
           rj.file_id AS rejection_file_id, rj.line_no AS rejection_line_no,
           x.kind AS transfer_failure, x.message AS transfer_message,
           x.file_id AS transfer_file_id, x.line_no AS transfer_line_no
    FROM chains c
    LEFT JOIN rejections_by_rid rj ON rj.node = c.prefill_node AND rj.rid = c.prefill_rid
    LEFT JOIN transfer_failures x ON x.bootstrap_room = c.bootstrap_room
)
SELECT * FROM joined
