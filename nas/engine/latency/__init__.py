"""The latency stage: what a subnet costs in milliseconds on a device, and the tables a search reads.

- `stage`: `latency_table` (`nas latency-table`: the run's table measured here, what `nas.api`
  re-exports).
- `measure`: timing a static model (median, p90) and the `DeviceRecord` of where.
- `table`: `LatencyTable`, the per-layer lookup table: its file, the archs that cover a space's
  layers, its measurement.
- `timings`: whole-network timings a user measured on a target, read from a CSV.
- `fit`: a table fitted from such timings (`nas latency-fit`).
- `sources`: what a search's `--latency-table` names (a table file, or measured per-arch ms).
"""
