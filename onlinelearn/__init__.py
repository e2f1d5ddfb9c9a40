"""Online learning with expert advice and bandit feedback (numpy only).

>>> import onlinelearn as ol
>>> ol.NormalHedge(3).update([0.0, 0.5, 1.0]).weights.shape
(3,)
"""

from . import bounds
from .adahedge import AdaHedge
from .bandits import UCB1, Exp3, Exp3IX
from .base import Learner
from .delayed import BOLD, QPMD, DelayedLearner, OnArrival
from .hedge import Hedge
from .normalhedge import AdaNormalHedge, NormalHedge

__all__ = [
    "BOLD",
    "QPMD",
    "UCB1",
    "AdaHedge",
    "AdaNormalHedge",
    "DelayedLearner",
    "Exp3",
    "Exp3IX",
    "Hedge",
    "Learner",
    "NormalHedge",
    "OnArrival",
    "bounds",
]
