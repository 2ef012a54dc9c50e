"""Conformance suites any implementation can run: the KEP-3698 PodNetwork API (conformance.kep) and NPWG delegating plugins (conformance.npwg)."""
