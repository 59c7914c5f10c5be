-- chain_evidence: every request_chains column with the chain's evidence text: its lines a responder opens, as FILE:LINE.
-- reads: request_chains, evidence_paths
-- stored as: view
--
-- engine_evidence: 'rejection=FILE:LINE; prefill=RECEIVE,FINISH; decode=RECEIVE,FINISH;
-- transfer_failure=FILE:LINE', the parts that exist; transfer_evidence and abort_evidence
-- ('abort=FILE:LINE') on their own. File names are relative to the common directory of the
-- evidence (evidence_paths); a file missing there shows as file<N>. A view: a query that joins a
-- few chains' ids to it computes the text of those chains only.
WITH
parts AS (
    SELECT r.*,
           'rejection=' || COALESCE(er.rel, 'file' || CAST(r.rejection_file_id AS VARCHAR(64)))
               || ':' || CAST(r.rejection_line_no AS VARCHAR(64)) AS rejection_evidence,
           'prefill=' || NULLIF(concat_ws(',',
               COALESCE(epr.rel, 'file' || CAST(r.prefill_received_file_id AS VARCHAR(64)))
                   || ':' || CAST(r.prefill_received_line_no AS VARCHAR(64)),
               COALESCE(epf.rel, 'file' || CAST(r.prefill_finished_file_id AS VARCHAR(64)))
                   || ':' || CAST(r.prefill_finished_line_no AS VARCHAR(64))), '') AS prefill_evidence,
           'decode=' || NULLIF(concat_ws(',',
               COALESCE(edr.rel, 'file' || CAST(r.decode_received_file_id AS VARCHAR(64)))
                   || ':' || CAST(r.decode_received_line_no AS VARCHAR(64)),
               COALESCE(edf.rel, 'file' || CAST(r.decode_finished_file_id AS VARCHAR(64)))
                   || ':' || CAST(r.decode_finished_line_no AS VARCHAR(64))), '') AS decode_evidence,
           'transfer_failure=' || COALESCE(ex.rel, 'file' || CAST(r.transfer_file_id AS VARCHAR(64)))
               || ':' || CAST(r.transfer_line_no AS VARCHAR(64)) AS transfer_evidence,
           'abort=' || COALESCE(ea.rel, 'file' || CAST(r.abort_file_id AS VARCHAR(64)))
               || ':' || CAST(r.abort_line_no AS VARCHAR(64)) AS abort_evidence
    FROM request_chains r
    LEFT JOIN evidence_paths er ON er.file_id = r.rejection_file_id
    LEFT JOIN evidence_paths epr ON epr.file_id = r.prefill_received_file_id
    LEFT JOIN evidence_paths epf ON epf.file_id = r.prefill_finished_file_id
    LEFT JOIN evidence_paths edr ON edr.file_id = r.decode_received_file_id
    LEFT JOIN evidence_paths edf ON edf.file_id = r.decode_finished_file_id
    LEFT JOIN evidence_paths ex ON ex.file_id = r.transfer_file_id
    LEFT JOIN evidence_paths ea ON ea.file_id = r.abort_file_id
)
SELECT p.*,
       NULLIF(concat_ws('; ', p.rejection_evidence, p.prefill_evidence, p.decode_evidence,
                        p.transfer_evidence), '') AS engine_evidence
FROM parts p
