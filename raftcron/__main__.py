"""`python -m raftcron`: the command line (`raftcron.cli.main`). Python runs this module
from the top of the package, so it stands there."""

from raftcron.cli.main import main

raise SystemExit(main())
