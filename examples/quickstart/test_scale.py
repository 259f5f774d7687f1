"""The quick start's target in a test suite of your own: the graphsafe fixture and its marker.

cd examples/quickstart && pytest test_scale.py
"""

import pytest
from scale import Scale


@pytest.mark.graphsafe(examples=20, capture=["worst", "minimal"])
def test_scale_is_graph_safe(graphsafe):
    graphsafe.check(Scale)  # fails the test with the findings; returns the CheckResult otherwise
