"""Privacy definitions, composition, conversion and the overlap-aware accountant (DESIGN.md step 4)."""

from typing import TYPE_CHECKING

from overlapdp._lazy import lazy_exports

if TYPE_CHECKING:
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

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "ConcurrentGuarantee": "concurrent",
    "concurrent_composition": "concurrent",
    "GDP": "definitions",
    "RDP": "definitions",
    "TCDP": "definitions",
    "ZCDP": "definitions",
    "ApproxDP": "definitions",
    "BudgetError": "definitions",
    "Guarantee": "definitions",
    "PureDP": "definitions",
    "ApproxTradeOff": "fdp",
    "CLTApproximation": "fdp",
    "GaussianTradeOff": "fdp",
    "LaplaceTradeOff": "fdp",
    "ProfileTradeOff": "fdp",
    "TradeOff": "fdp",
    "gdp_clt": "fdp",
    "lce": "fdp",
    "tensor": "fdp",
    "MEASURES": "measures",
    "Measure": "measures",
    "DiscreteGaussian": "mechanisms",
    "DiscreteLaplace": "mechanisms",
    "Gaussian": "mechanisms",
    "Laplace": "mechanisms",
    "Mechanism": "mechanisms",
    "OpaqueApproxDP": "mechanisms",
    "OpaqueTCDP": "mechanisms",
    "RandomizedResponse": "mechanisms",
    "Odometer": "odometer",
    "Composition": "optimal",
    "advanced_composition": "optimal",
    "compose_approx": "optimal",
    "kov_delta": "optimal",
    "kov_epsilon": "optimal",
    "PLD": "pld",
    "compose_all": "pld",
    "PrivacyFilter": "privacy_filter",
    "UtilityGain": "utility",
    "utility_gain": "utility",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

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
