"""The front door: webhook and CRCR callback service, event normalization, GitHub adapter.

Never imports torch.
"""
