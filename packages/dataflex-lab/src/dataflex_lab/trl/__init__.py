"""The lab's TRL parts: the toy task in TRL's terms and ``dataflex-trl demo`` (extra ``[trl]``).

Importing this package imports no TRL; its modules do when used.
"""
