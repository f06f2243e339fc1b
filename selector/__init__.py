"""The four-stage test selector (Scout, Retrieve, Plan, Verify): pure functions over plain data.

No I/O and never torch.
"""
