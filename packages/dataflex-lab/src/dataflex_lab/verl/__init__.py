"""The lab's verl parts: the CPU harness, the sandbox and ``dataflex-verl demo`` / ``demo-step`` (extra ``[verl]``).

Importing this package imports no verl; its modules do when used.
"""
