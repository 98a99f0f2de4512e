"""Operations: preflight, doctor, rollback, report."""
