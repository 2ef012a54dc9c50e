"""KEP-3698 Multi-Network: the PodNetwork API, its static validation and controller.

This package is the KEP layer. It knows nothing of CNI or of the NPWG standard
(enforced by `.importlinter`).
"""

__all__: list[str] = []
