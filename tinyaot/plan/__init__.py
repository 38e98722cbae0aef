"""Memory planning: buffers (size, lifetime, alias requests) in, arena offsets out. See planner.py."""
from .planner import (
    STRATEGIES,
    Buffer,
    LowerBound,
    Plan,
    PlanError,
    check_plan,
    lower_bound,
    plan,
    plan_greedy,
    plan_greedy_by_breadth,
    plan_linear,
)

__all__ = [
    "STRATEGIES",
    "Buffer",
    "LowerBound",
    "Plan",
    "PlanError",
    "check_plan",
    "lower_bound",
    "plan",
    "plan_greedy",
    "plan_greedy_by_breadth",
    "plan_linear",
]
