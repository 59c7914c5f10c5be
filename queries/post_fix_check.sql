-- post_fix_check: is it over? node configurations now, placeholder 2xx after each fix, integrity lines.
-- param $node VARCHAR: only this node's rows (NULL: all; fleet-wide rows are always shown)
-- columns: check, node, result, n, first_ts, last_ts, detail
--
-- One row per check (and node), result pass | fail | warn | info:
--   node_config               per node and pod still running (each pod's latest start, unless a
--                             new pod of the node started after its last line: start_periods):
--                             fail while still exposed (pool < context on a prefill-capable node),
--                             warn when unknown, else pass; detail says when the node was fixed
--                             (the end of its last exposed period, once none is open)
--   placeholder_after_fix     per node that was exposed and restarted: scheduler input_length
--                             rejections (the placeholder path) logged after its fixing restart;
--                             fail if any of them answered 2xx (gateway) or finished a decode
--   margin_rejections         per node never exposed at the time: placeholder-path rejections
--                             inside ok periods (prompts in the 6-token scheduler margin); warn
--   long_prompts_after_fix    per fixed node: prefill legs with prompts >= its old admission limit
--                             served with the full prompt after the fix (info: the fix works)
--   integrity_events          fleet: KV checksum mismatch / context-corruption lines; fail if any
--   kv_verification           fleet: kv_verified lines, or checksum/canary enabled at the latest
--                             starts; warn when neither (enable --disaggregation-enable-kv-checksum
--                             / --kv-canary where supported)
WITH
latest AS (
    -- each pod's period still in force, and the first start of another pod of the node after it (a
    -- rolling update's new pod starts before the old one's last line: the old one stays open)
    SELECT j.*, n.newer_pod_start
    FROM start_periods j
    LEFT JOIN (SELECT a.node, a.pod, a.start_seq, min(o.ts_start) AS newer_pod_start
               FROM start_periods a
               JOIN start_periods o ON o.node = a.node AND o.pod <> a.pod AND o.ts_start > a.ts_start
               GROUP BY a.node, a.pod, a.start_seq) n
      ON n.node = j.node AND n.pod = j.pod AND n.start_seq = j.start_seq
    WHERE j.next_start IS NULL
),
fixes AS (
    -- a node is fixed once none of its exposed periods is still open (of any of its pods): at the
    -- end of the last one, i.e. the start that replaced it (a restart, or a new pod of the node)
    SELECT node, min(admission_limit) AS old_limit, max(period_end) AS fixed_at
    FROM start_periods
    WHERE verdict = 'exposed'
    GROUP BY node
    HAVING max(CASE WHEN period_open THEN 1 ELSE 0 END) = 0
),
rej AS (
    SELECT r.node, r.pod, r.rid, r.ts, r.input_tokens FROM engine_rejections r
    WHERE r.kind = 'input_length'
),
rej_rooms AS (
    SELECT r.node, r.rid, r.ts, max(p.bootstrap_room) AS bootstrap_room
    FROM rej r
    LEFT JOIN engine_requests p ON p.rid = r.rid AND p.node = r.node AND p.bootstrap_room IS NOT NULL
    GROUP BY r.node, r.rid, r.ts
),
rej_legs AS (
    -- the other legs of the rejected requests (same bootstrap_room)
    SELECT d.* FROM engine_requests d
    JOIN (SELECT DISTINCT bootstrap_room FROM rej_rooms WHERE bootstrap_room IS NOT NULL) m
      ON m.bootstrap_room = d.bootstrap_room
),
rej_ids AS (
    SELECT bootstrap_room, header_request_id AS id FROM rej_legs WHERE header_request_id IS NOT NULL
    UNION
    SELECT bootstrap_room, rid FROM rej_legs WHERE rid IS NOT NULL
),
rej_gw AS (
    SELECT x.bootstrap_room, max(CASE WHEN x.status BETWEEN 200 AND 299 THEN 1 ELSE 0 END) AS gw_2xx
    FROM (
        SELECT i.bootstrap_room, g.status FROM rej_ids i JOIN gateway_requests_unique g ON g.request_id = i.id
        UNION ALL
        SELECT i.bootstrap_room, g.status FROM rej_ids i JOIN gateway_requests_unique g ON g.header_request_id = i.id
    ) x
    GROUP BY x.bootstrap_room
),
rej_outcome AS (
    -- how did a rejected request end? its decode leg and its gateway record
    SELECT r.node, r.rid, r.ts,
           max(CASE WHEN d.node <> r.node AND d.kind IN ('finished', 'metrics')
                     AND d.finish_type IS NOT NULL AND d.finish_type <> 'abort' THEN 1 ELSE 0 END) AS decode_ok,
           max(COALESCE(g.gw_2xx, 0)) AS gw_2xx
    FROM rej_rooms r
    LEFT JOIN rej_legs d ON d.bootstrap_room = r.bootstrap_room
    LEFT JOIN rej_gw g ON g.bootstrap_room = r.bootstrap_room
    GROUP BY r.node, r.rid, r.ts
),
checks AS (
    SELECT 1 AS ord, 'node_config' AS "check", l.node,
           CASE WHEN l.verdict = 'exposed' THEN 'fail' WHEN l.verdict = 'unknown' THEN 'warn' ELSE 'pass' END AS result,
           CAST(NULL AS BIGINT) AS n, l.ts_start AS first_ts, l.period_end AS last_ts,
           'latest start #' || CAST(l.start_seq AS VARCHAR(64))
               || CASE WHEN l.pod <> l.node THEN ' of pod ' || l.pod ELSE '' END
               || ' (' || COALESCE(l.role, 'role unknown')
               || '): pool ' || COALESCE(CAST(l.max_total_num_tokens AS VARCHAR(64)), '?')
               || ', context ' || COALESCE(CAST(l.context_len AS VARCHAR(64)), '?')
               || ', admission limit ' || COALESCE(CAST(l.admission_limit AS VARCHAR(64)), '?')
               || CASE WHEN f.fixed_at IS NOT NULL AND l.verdict <> 'exposed'
                       THEN '; exposed until the restart at ' || CAST(f.fixed_at AS VARCHAR(64)) ELSE '' END
               || CASE WHEN l.verdict = 'exposed' THEN '; STILL EXPOSED: lower the context length or enlarge the pool' ELSE '' END
               || CASE WHEN l.verdict <> 'ok' AND l.newer_pod_start IS NOT NULL
                       THEN '; a newer pod of the node started at ' || CAST(l.newer_pod_start AS VARCHAR(64))
                            || ' and this pod''s last line is at ' || CAST(l.period_end AS VARCHAR(64))
                            || ': if it stopped there, it no longer runs this configuration' ELSE '' END
               AS detail
    FROM latest l LEFT JOIN fixes f ON f.node = l.node
    UNION ALL
    SELECT 2, 'placeholder_after_fix', f.node,
           CASE WHEN SUM(CASE WHEN o.gw_2xx = 1 OR o.decode_ok = 1 THEN 1 ELSE 0 END) > 0 THEN 'fail' ELSE 'pass' END,
           count(o.rid), min(o.ts), max(o.ts),
           CAST(count(o.rid) AS VARCHAR(64)) || ' placeholder-path rejection(s) after the fix at '
               || CAST(f.fixed_at AS VARCHAR(64)) || ', '
               || CAST(COALESCE(SUM(CASE WHEN o.gw_2xx = 1 OR o.decode_ok = 1 THEN 1 ELSE 0 END), 0) AS VARCHAR(64))
               || ' answered 2xx or decoded'
    FROM fixes f
    LEFT JOIN rej_outcome o ON o.node = f.node AND o.ts >= f.fixed_at
    GROUP BY f.node, f.fixed_at
    UNION ALL
    SELECT 3, 'margin_rejections', j.node, 'warn', count(*), min(r.ts), max(r.ts),
           CAST(count(*) AS VARCHAR(64)) || ' placeholder-path rejection(s) while the node was not exposed'
               || ' (prompts within the scheduler margin below context_len)'
    FROM start_periods j
    JOIN rej r ON r.node = j.node AND r.pod = j.pod
     AND r.ts >= j.ts_start AND (j.next_start IS NULL OR r.ts < j.next_start)
    WHERE j.verdict = 'ok'
    GROUP BY j.node
    UNION ALL
    SELECT 4, 'long_prompts_after_fix', f.node, 'info', count(e.rid), min(e.ts), max(e.ts),
           CAST(count(e.rid) AS VARCHAR(64)) || ' prompt(s) of >= ' || CAST(f.old_limit AS VARCHAR(64))
               || ' tokens (the old admission limit) prefilled in full after the fix'
    FROM fixes f
    LEFT JOIN (
        SELECT e.node, e.rid, e.ts, e.prompt_tokens FROM engine_requests e
        WHERE e.kind IN ('finished', 'metrics')
          AND e.prompt_tokens >= (SELECT min(old_limit) FROM fixes)
    ) e
      ON e.node = f.node AND e.ts >= f.fixed_at AND e.prompt_tokens >= f.old_limit
    GROUP BY f.node, f.old_limit
    UNION ALL
    SELECT 5, 'integrity_events', CAST(NULL AS VARCHAR(64)),
           CASE WHEN count(*) > 0 THEN 'fail' ELSE 'pass' END, count(*), min(ts), max(ts),
           CAST(count(*) AS VARCHAR(64)) || ' KV checksum mismatch / context corruption line(s)'
    FROM engine_events
    WHERE kind IN ('kv_checksum_mismatch', 'context_corruption')
    UNION ALL
    SELECT 6, 'kv_verification', CAST(NULL AS VARCHAR(64)),
           CASE WHEN v.n > 0 THEN 'pass' ELSE 'warn' END, v.n, v.first_ts, v.last_ts,
           CASE WHEN v.n > 0 THEN CAST(v.n AS VARCHAR(64)) || ' KV verification line(s): requests are being verified'
                WHEN s.n_enabled > 0 THEN 'checksum/canary enabled on ' || CAST(s.n_enabled AS VARCHAR(64))
                     || ' node(s) but no verification line logged'
                ELSE 'no KV checksum/canary: enable --disaggregation-enable-kv-checksum / --kv-canary where supported' END
    FROM (SELECT count(*) AS n, min(ts) AS first_ts, max(ts) AS last_ts FROM engine_events WHERE kind = 'kv_verified') v
    CROSS JOIN (SELECT SUM(CASE WHEN kv_checksum_enabled THEN 1 ELSE 0 END) AS n_enabled FROM latest) s
)
SELECT "check", node, result, n, first_ts, last_ts, detail
FROM checks
WHERE $node IS NULL OR node IS NULL OR node = $node
ORDER BY ord, node, first_ts, detail
