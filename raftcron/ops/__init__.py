"""Running raftcron outside the replicated core: the local demo cluster (`local`, for
`raftcron up`), backups and restores of the state (`backup`), and the membership and
backup operations a running node performs for the API (`node_ops`)."""
