"""Statistical privacy audits: empirical lower bounds on a mechanism's epsilon (see
:mod:`overlapdp.audit.empirical`), and deliberately BROKEN sparse-vector variants that the audit must
flag (:mod:`overlapdp.audit.broken_svt`; never use them to release data), with the battery of attacks
that separates them from the correct mechanism (:mod:`overlapdp.audit.battery`)."""

from overlapdp.audit.empirical import AuditResult, Sampler, audit_epsilon, clopper_pearson, repeat

__all__ = ["AuditResult", "Sampler", "audit_epsilon", "clopper_pearson", "repeat"]
