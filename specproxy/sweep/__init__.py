"""`specproxy sweep`: the alternate-mode comparison at a ladder of loads, per setting value.

Sits above ``replay``, ``report`` and ``launch`` (it composes them) and below ``cli``.
"""
