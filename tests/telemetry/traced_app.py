"""The crash matrix's app, in a worker process that exports its spans to a file.

The OpenTelemetry SDK is configured with a simple (synchronous) span processor and an
exporter that appends one JSON line per ended span to ``LOOM_TEST_SPANS_FILE`` and fsyncs
it, so the spans a worker ended before it was SIGKILLed survive it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.delivery.crash_app import app

__all__ = ["app"]


class FileSpanExporter(SpanExporter):
    """Appends ``{name, trace_id, span_id, parent_id, attributes}`` lines to a file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                context = span.get_span_context()
                assert context is not None
                record = {
                    "name": span.name,
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                }
                out.write(json.dumps(record) + "\n")
            out.flush()
            os.fsync(out.fileno())
        return SpanExportResult.SUCCESS


_provider = TracerProvider()
_provider.add_span_processor(
    SimpleSpanProcessor(FileSpanExporter(os.environ["LOOM_TEST_SPANS_FILE"]))
)
trace.set_tracer_provider(_provider)
