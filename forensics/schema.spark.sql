-- Spark SQL forms of the case views of schema.sql that have no faithful automatic translation
-- (forensics.spark.translate). Same name, same columns, same rows: tests/test_spark_parity.py runs
-- each view on both engines and compares every row. Every other view is translated from schema.sql.

-- engine_batch_fields: DuckDB builds the MAP through json_transform (no Spark equivalent). Here: the
-- same two paths. A plain body ("k: v, k: v", no quotes or backslashes, one ': ' per ', ' pair) is
-- split as printed; anything else is read pair by pair with the same regex, keys and values
-- trimmed. A repeated key keeps its first value, as in DuckDB.
CREATE OR REPLACE TEMP VIEW engine_batch_fields AS
SELECT node, ts, ts_inferred, ranks, kind, iter, new_seq, new_token, cached_token, num_token, running_req,
       queue_req, token_usage, throughput,
       map_from_entries(filter(zip_with(k, v, (a, b) -> struct(a AS key, b AS value)),
                               (e, i) -> array_position(k, e.key) = i + 1)) AS fields,
       file_id, line_no, fields_raw
FROM (
    SELECT *,
           CASE WHEN ok THEN transform(pairs, p -> substring_index(p, ': ', 1))
                ELSE transform(regexp_extract_all(fields_raw,
                         '(?:^\\w+ batch(?: \\[\\d+\\])?[.,] ?|, )([^:,]+): ([^,]*)', 1), x -> trim(x)) END AS k,
           CASE WHEN ok THEN transform(pairs, p -> substr(p, instr(p, ': ') + 2))
                ELSE transform(regexp_extract_all(fields_raw,
                         '(?:^\\w+ batch(?: \\[\\d+\\])?[.,] ?|, )([^:,]+): ([^,]*)', 2), x -> trim(x)) END AS v
    FROM (
        SELECT *, split(body, ', ') AS pairs,
               NOT contains(body, '"') AND NOT contains(body, '\\') AND body <> ''
               AND size(split(body, ', ')) = size(split(body, ': ')) - 1 AS ok
        FROM (SELECT *, TRIM(TRAILING ',' FROM trim(substr(fields_raw, instr(fields_raw, ' #') + 1))) AS body
              FROM engine_batches)
    )
);

-- evidence_paths: DuckDB finds the common directory with a recursive CTE (one row per character);
-- Spark runs each recursion level as a job of its own (33 s for the sample's 240 paths, measured).
-- The same cut without recursion: the last separator within the common prefix of the smallest and
-- largest path (0: none), then each path relative to it.
CREATE OR REPLACE TEMP VIEW evidence_paths AS
WITH
ev_bounds AS (
    SELECT min(path) AS a, max(path) AS b FROM evidence_files
),
ev_cut AS (
    SELECT max(CASE WHEN substr(a, n, 1) IN ('/', '\\') THEN n ELSE 0 END) AS cut
    FROM ev_bounds LATERAL VIEW explode(sequence(1, length(a))) s AS n
    WHERE a IS NOT NULL AND substr(a, 1, n) = substr(b, 1, n)
)
SELECT f.file_id, substr(f.path, r.cut + 1) AS rel
FROM evidence_files f CROSS JOIN ev_cut r;
