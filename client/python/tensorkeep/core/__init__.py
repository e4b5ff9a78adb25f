"""smdebug's ``smdebug.core`` paths: ``tensorkeep.core.modes``, ``.tensor``,
``.collection``, ``.save_config``, ``.reduction_config``.

These modules need neither torch nor a collector: the hook
(``tensorkeep.pytorch``) and the analysis side (``tensorkeep.trials``) share them.
"""
