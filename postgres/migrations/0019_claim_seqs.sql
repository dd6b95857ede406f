-- claim_seqs raises the session's reserved seq bound from p_above to
-- p_through in the caller's transaction: a seq reservation made by the
-- write that first uses its seqs (forge.SeqClaim), so a turn begun on a
-- replica that did not write the session last reserves in its BeginTurn,
-- not in a commit of its own. FG007 (ErrSeqClaimLost) when the bound is
-- not p_above any more: another process reserved seqs since it was read.
CREATE FUNCTION claim_seqs(p_session text, p_above bigint, p_through bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t text COLLATE "C" := current_setting('forge.tenant', true);
BEGIN
    UPDATE forge.sessions SET seq_reserved = p_through
        WHERE tenant = t AND id = p_session AND seq_reserved = p_above;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the reserved seqs of session % moved past %', p_session, p_above USING ERRCODE = 'FG007';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION claim_seqs(text, bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claim_seqs(text, bigint, bigint) TO {{runtime}};
