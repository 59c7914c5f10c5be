-- transfer_failures: per bootstrap_room, the first KV transfer failure logged for it (either side): kind, time, message, line.
-- reads: engine_events
-- stored as: view
--
-- Kinds: prefill_transfer_failed, decode_transfer_failed, kvpoll_timeout (KVPoll.WaitingForInput
-- timeouts), bootstrap_failed, transfer_backend_error. Both sides log the request's room, so the
-- room ties the failure to the request; room 0 is the health check's and is never a request.
-- kind is the first by name when several were logged, message the first by text; the line is the
-- first in the evidence (file_id, line_no).
WITH
grouped AS (
    SELECT e.bootstrap_room, min(e.ts) AS ts, min(e.kind) AS kind, min(e.message) AS message,
           count(*) AS n_events,
           min(CAST(e.file_id AS BIGINT) * 10000000000 + e.line_no) AS ref
    FROM engine_events e
    WHERE e.kind IN ('prefill_transfer_failed', 'decode_transfer_failed', 'kvpoll_timeout',
                     'bootstrap_failed', 'transfer_backend_error')
      AND e.bootstrap_room IS NOT NULL AND e.bootstrap_room <> 0
    GROUP BY e.bootstrap_room
)
SELECT g.bootstrap_room, g.kind, g.ts, g.message, g.n_events,
       CAST((g.ref - g.ref % 10000000000) / 10000000000 AS INTEGER) AS file_id,
       g.ref % 10000000000 AS line_no
FROM grouped g
