"""Repository tasks (issue 14): content-addressed snapshots, synthetic repositories, the
scripted expert, AST mutations, and loading them into the clean stage."""
