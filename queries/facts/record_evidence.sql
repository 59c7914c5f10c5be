-- record_evidence: every gateway_top column with the record's evidence text 'gateway=FILE:LINE'.
-- reads: gateway_top, evidence_paths
-- stored as: view
--
-- The file is named relative to the common directory of the evidence (evidence_paths); a file
-- missing there shows as file<N>. A view: a query that joins a few records' keys to it computes
-- the text of those records only.
SELECT g.*,
       'gateway=' || COALESCE(ep.rel, 'file' || CAST(g.file_id AS VARCHAR(64)))
           || ':' || CAST(g.line_no AS VARCHAR(64)) AS gateway_evidence
FROM gateway_top g
LEFT JOIN evidence_paths ep ON ep.file_id = g.file_id
