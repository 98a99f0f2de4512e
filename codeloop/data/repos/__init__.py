"""Repository tasks: content-addressed snapshots, synthetic repositories, the
scripted expert, AST mutations, and loading them into the clean stage."""
