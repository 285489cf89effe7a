"""Privacy definitions, composition, conversion and the overlap-aware accountant (DESIGN.md step 4)."""

from overlapdp.privacy.concurrent import ConcurrentGuarantee, concurrent_composition
from overlapdp.privacy.definitions import GDP, RDP, TCDP, ZCDP, ApproxDP, BudgetError, Guarantee, PureDP
from overlapdp.privacy.fdp import (
    ApproxTradeOff,
    CLTApproximation,
    GaussianTradeOff,
    LaplaceTradeOff,
    ProfileTradeOff,
    TradeOff,
    gdp_clt,
    lce,
    tensor,
)
from overlapdp.privacy.measures import MEASURES, Measure
from overlapdp.privacy.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    Mechanism,
    OpaqueApproxDP,
    OpaqueTCDP,
    RandomizedResponse,
)
from overlapdp.privacy.odometer import Odometer
from overlapdp.privacy.optimal import (
    Composition,
    advanced_composition,
    compose_approx,
    kov_delta,
    kov_epsilon,
)
from overlapdp.privacy.pld import PLD, compose_all
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.privacy.utility import UtilityGain, utility_gain

__all__ = [
    "GDP",
    "MEASURES",
    "PLD",
    "RDP",
    "TCDP",
    "ZCDP",
    "ApproxDP",
    "ApproxTradeOff",
    "BudgetError",
    "CLTApproximation",
    "Composition",
    "ConcurrentGuarantee",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Gaussian",
    "GaussianTradeOff",
    "Guarantee",
    "Laplace",
    "LaplaceTradeOff",
    "Measure",
    "Mechanism",
    "Odometer",
    "OpaqueApproxDP",
    "OpaqueTCDP",
    "PrivacyFilter",
    "ProfileTradeOff",
    "PureDP",
    "RandomizedResponse",
    "TradeOff",
    "UtilityGain",
    "advanced_composition",
    "compose_all",
    "compose_approx",
    "concurrent_composition",
    "gdp_clt",
    "kov_delta",
    "kov_epsilon",
    "lce",
    "tensor",
    "utility_gain",
]
