from raftcron.cli import main

raise SystemExit(main())
