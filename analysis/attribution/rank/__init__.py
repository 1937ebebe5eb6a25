"""One rank through the namers: attribute its steps (attribute.py), and what is built on that
(agreement of two attributions, calibration against module ranges, learning a signature).

Why a folder of its own: these ask the namers (analysis/attribution/namers/), which use the naming
vocabulary of analysis/attribution/; kept apart, the imports run one way, attribution <- namers <- rank.
"""
