"""The `raftcron` command line: its parser and commands (`main`), the run and alert views
(`runs`), the operator's commands (`ops`, `deploy_init`) and the HTTP client they share."""
