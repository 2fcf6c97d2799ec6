"""`raftcron.node.Node` has everything the API reads through `NodeView`."""

from __future__ import annotations

import inspect
import subprocess
import sys

from raftcron.api.metrics import NodeMetrics
from raftcron.node import Node
from raftcron.node_view import NodeMetricsView, NodeView


def test_node_has_every_method_and_attribute_the_view_names() -> None:
    methods = {n for n, v in vars(NodeView).items()
               if inspect.isfunction(v) and not n.startswith("_")}
    for name in methods:
        assert callable(getattr(Node, name, None)), name
    init = inspect.getsource(Node.__init__)
    for name in NodeView.__annotations__:
        assert f"self.{name} =" in init or f"self.{name}:" in init or \
            f"= self.{name} =" in init, f"Node.__init__ does not set {name}"


def test_the_api_imports_without_the_node_module() -> None:
    """No import circle: loading the API does not load raftcron.node."""
    code = ("import sys, raftcron.api.app, raftcron.ops.node_ops; "
            "sys.exit(1 if 'raftcron.node' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_node_metrics_have_what_the_metrics_view_names() -> None:
    metrics = NodeMetrics()
    for name in NodeMetricsView.__annotations__:
        assert hasattr(metrics, name), name
    for name, v in vars(NodeMetricsView).items():
        if inspect.isfunction(v) and not name.startswith("_"):
            assert callable(getattr(metrics, name, None)), name
