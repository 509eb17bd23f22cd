"""Hardware and model catalogues and the analytic performance model: pure data and arithmetic.

Nothing here touches the machine; `probe` measures it and compares with these figures.
"""
