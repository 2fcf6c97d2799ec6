"""The parts `raftcron.node.Node` is made of, one responsibility each, sharing the state
that `Node.__init__` sets up (`base.NodeBase` names it): what the node says about itself
(`status`), following the member records (`peers`), what an applied command wakes on the
node (`applied`), and leading (`leadership`: beginning epochs, the clock gate, handing
leadership over). `raftcron.node` puts them together and runs them."""
