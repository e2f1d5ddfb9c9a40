"""Online learning with expert advice and bandit feedback (numpy only).

>>> import onlinelearn as ol
>>> ol.Hedge(3).update([0.0, 0.5, 1.0]).weights.shape
(3,)
"""

from .base import Learner
from .hedge import Hedge

__all__ = ["Hedge", "Learner"]
