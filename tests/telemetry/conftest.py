"""One OpenTelemetry SDK per test process: in-memory span exporter and metric reader.

A tracer provider can be set once per process, so the fixture installs it the first time
and clears what was exported before each test. Its sampler records only while a test that
asked for the fixture runs: the other tests of the process make no spans to keep.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult


@dataclass
class Otel:
    """The exporter and reader of the test process's SDK."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def counters(self) -> dict[str, dict[tuple[tuple[str, str], ...], int]]:
        """Every counter's value per attribute set, read now."""
        data = self.metrics.get_metrics_data()
        found: dict[str, dict[tuple[tuple[str, str], ...], int]] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:  # type: ignore[union-attr]
                        key = tuple(sorted((k, str(v)) for k, v in point.attributes.items()))
                        found.setdefault(metric.name, {})[key] = point.value  # type: ignore[union-attr]
        return found


class _Switch(Sampler):
    """Samples every span while ``on``, none otherwise."""

    on = False

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        *args: Any,
        **kwargs: Any,
    ) -> SamplingResult:
        if not self.on:
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)  # the span's attributes

    def get_description(self) -> str:
        return "switch"


_SWITCH = _Switch()
_OTEL: Otel | None = None


@pytest.fixture
def otel() -> Iterator[Otel]:
    """The process's SDK, with no spans exported yet by this test."""
    global _OTEL
    if _OTEL is None:
        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        provider = TracerProvider(sampler=_SWITCH)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _OTEL = Otel(exporter, reader)
    _OTEL.spans.clear()
    _SWITCH.on = True
    try:
        yield _OTEL
    finally:
        _SWITCH.on = False
