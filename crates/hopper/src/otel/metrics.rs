//! hopper's metrics as OpenTelemetry instruments: a [`metrics::Recorder`] that records every
//! counter, gauge and histogram the `metrics` facade sees (hopper's, see
//! [`crate::metrics`], and any of the application's) into instruments of the same name on an
//! OpenTelemetry [`Meter`], with the labels as attributes, and hands each update on to an
//! inner recorder too (Prometheus, for `/metrics`), so both see the same figures.
//!
//! Instruments are *bound* to their attributes when their handle is made (the
//! SDK's `experimental_metrics_bound_instruments`): an update then goes straight to its
//! data point. Unbound, each update hashed the attribute list to find it, and the attempt
//! metrics (three updates per job) cost W3 about 4% of hopper's CPU (docs/benchmarks.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{BoundCounter, BoundGauge, BoundHistogram, Meter};

use crate::metrics::{HISTOGRAM_BUCKETS, HISTOGRAMS};

/// A [`Recorder`] into an OpenTelemetry [`Meter`] (and an optional inner recorder).
/// Install it with [`metrics::set_global_recorder`].
pub struct OtelRecorder {
    meter: Meter,
    inner: Option<Box<dyn Recorder + Send + Sync>>,
    handles: Mutex<Handles>,
}

/// The handles made so far, by key (name and labels): each update of a registered metric
/// then costs one map lookup, as in the Prometheus recorder.
#[derive(Default)]
struct Handles {
    counters: HashMap<Key, Counter>,
    gauges: HashMap<Key, Gauge>,
    histograms: HashMap<Key, Histogram>,
}

impl OtelRecorder {
    /// A recorder into `meter` alone.
    pub fn new(meter: Meter) -> Self {
        OtelRecorder {
            meter,
            inner: None,
            handles: Mutex::new(Handles::default()),
        }
    }

    /// This recorder, also recording into `inner` (say, the Prometheus recorder of
    /// `hopper_web::metrics`).
    pub fn with_inner(self, inner: impl Recorder + Send + Sync + 'static) -> Self {
        OtelRecorder {
            inner: Some(Box::new(inner)),
            ..self
        }
    }

    fn handles(&self) -> std::sync::MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for OtelRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelRecorder")
            .field("inner", &self.inner.is_some())
            .finish()
    }
}

fn attributes(key: &Key) -> Vec<KeyValue> {
    key.labels()
        .map(|label| KeyValue::new(label.key().to_owned(), label.value().to_owned()))
        .collect()
}

struct OtelCounter {
    instrument: BoundCounter<u64>,
    inner: Option<Counter>,
}

impl CounterFn for OtelCounter {
    fn increment(&self, value: u64) {
        self.instrument.add(value);
        if let Some(inner) = &self.inner {
            inner.increment(value);
        }
    }

    fn absolute(&self, value: u64) {
        // OpenTelemetry counters only add; an absolute value is for the inner recorder.
        if let Some(inner) = &self.inner {
            inner.absolute(value);
        }
    }
}

struct OtelGauge {
    instrument: BoundGauge<f64>,
    /// The gauge's value (as f64 bits), so increments and decrements record the sum.
    value: AtomicU64,
    inner: Option<Gauge>,
}

impl OtelGauge {
    fn update(&self, change: impl Fn(f64) -> f64) {
        let mut current = self.value.load(Ordering::Relaxed);
        loop {
            let next = change(f64::from_bits(current));
            match self.value.compare_exchange_weak(
                current,
                next.to_bits(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.instrument.record(next);
                    return;
                }
                Err(actual) => current = actual,
            }
        }
    }
}

impl GaugeFn for OtelGauge {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
        if let Some(inner) = &self.inner {
            inner.increment(value);
        }
    }

    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
        if let Some(inner) = &self.inner {
            inner.decrement(value);
        }
    }

    fn set(&self, value: f64) {
        self.update(|_| value);
        if let Some(inner) = &self.inner {
            inner.set(value);
        }
    }
}

struct OtelHistogram {
    instrument: BoundHistogram<f64>,
    inner: Option<Histogram>,
}

impl HistogramFn for OtelHistogram {
    fn record(&self, value: f64) {
        self.instrument.record(value);
        if let Some(inner) = &self.inner {
            inner.record(value);
        }
    }
}

impl Recorder for OtelRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if let Some(inner) = &self.inner {
            inner.describe_counter(key, unit, description);
        }
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if let Some(inner) = &self.inner {
            inner.describe_gauge(key, unit, description);
        }
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if let Some(inner) = &self.inner {
            inner.describe_histogram(key, unit, description);
        }
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if let Some(counter) = self.handles().counters.get(key) {
            return counter.clone();
        }
        let counter = Counter::from_arc(Arc::new(OtelCounter {
            instrument: self
                .meter
                .u64_counter(key.name().to_owned())
                .build()
                .bind(&attributes(key)),
            inner: self
                .inner
                .as_ref()
                .map(|r| r.register_counter(key, metadata)),
        }));
        self.handles().counters.insert(key.clone(), counter.clone());
        counter
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if let Some(gauge) = self.handles().gauges.get(key) {
            return gauge.clone();
        }
        let gauge = Gauge::from_arc(Arc::new(OtelGauge {
            instrument: self
                .meter
                .f64_gauge(key.name().to_owned())
                .build()
                .bind(&attributes(key)),
            value: AtomicU64::new(0f64.to_bits()),
            inner: self.inner.as_ref().map(|r| r.register_gauge(key, metadata)),
        }));
        self.handles().gauges.insert(key.clone(), gauge.clone());
        gauge
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if let Some(histogram) = self.handles().histograms.get(key) {
            return histogram.clone();
        }
        let mut builder = self.meter.f64_histogram(key.name().to_owned());
        if HISTOGRAMS.contains(&key.name()) {
            builder = builder
                .with_unit("s")
                .with_boundaries(HISTOGRAM_BUCKETS.to_vec());
        }
        let histogram = Histogram::from_arc(Arc::new(OtelHistogram {
            instrument: builder.build().bind(&attributes(key)),
            inner: self
                .inner
                .as_ref()
                .map(|r| r.register_histogram(key, metadata)),
        }));
        self.handles()
            .histograms
            .insert(key.clone(), histogram.clone());
        histogram
    }
}

#[cfg(test)]
mod tests {
    use metrics::{counter, gauge, histogram, with_local_recorder};
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, SdkMeterProvider};

    use super::OtelRecorder;

    /// The value of the point of `name` whose `queue` attribute is `queue`, as `read` finds it.
    fn point<T>(
        exported: &[ResourceMetrics],
        name: &str,
        read: impl Fn(&AggregatedMetrics, &str) -> Option<T>,
        queue: &str,
    ) -> Option<T> {
        exported
            .iter()
            .flat_map(|r| r.scope_metrics())
            .flat_map(|s| s.metrics())
            .filter(|m| m.name() == name)
            .find_map(|m| read(m.data(), queue))
    }

    fn has_queue<'a>(
        mut attributes: impl Iterator<Item = &'a opentelemetry::KeyValue>,
        queue: &str,
    ) -> bool {
        attributes.any(|kv| kv.key.as_str() == "queue" && kv.value.as_str() == queue)
    }

    /// Counters, gauges and histograms of the `metrics` facade reach OpenTelemetry with
    /// their labels as attributes, one point per label set, every update counted (through
    /// the bound instruments the recorder keeps per key).
    #[test]
    fn each_metric_is_exported_with_its_labels() -> anyhow::Result<()> {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_periodic_exporter(exporter.clone())
            .build();
        let recorder = OtelRecorder::new(provider.meter("hopper"));
        with_local_recorder(&recorder, || {
            counter!("t_total", "queue" => "a").increment(2);
            counter!("t_total", "queue" => "a").increment(1);
            counter!("t_total", "queue" => "b").increment(5);
            histogram!("t_seconds", "queue" => "a").record(0.5);
            histogram!("t_seconds", "queue" => "a").record(1.5);
            histogram!("t_seconds", "queue" => "b").record(4.0);
            gauge!("t_level", "queue" => "a").set(3.0);
            gauge!("t_level", "queue" => "a").increment(2.0);
        });
        provider.force_flush()?;
        let exported = exporter.get_finished_metrics()?;

        let sum = |data: &AggregatedMetrics, queue: &str| match data {
            AggregatedMetrics::U64(MetricData::Sum(sum)) => sum
                .data_points()
                .find(|p| has_queue(p.attributes(), queue))
                .map(|p| p.value()),
            _ => None,
        };
        assert_eq!(point(&exported, "t_total", sum, "a"), Some(3));
        assert_eq!(point(&exported, "t_total", sum, "b"), Some(5));

        let histogram = |data: &AggregatedMetrics, queue: &str| match data {
            AggregatedMetrics::F64(MetricData::Histogram(h)) => h
                .data_points()
                .find(|p| has_queue(p.attributes(), queue))
                .map(|p| (p.count(), p.sum())),
            _ => None,
        };
        assert_eq!(
            point(&exported, "t_seconds", histogram, "a"),
            Some((2, 2.0))
        );
        assert_eq!(
            point(&exported, "t_seconds", histogram, "b"),
            Some((1, 4.0))
        );

        let level = |data: &AggregatedMetrics, queue: &str| match data {
            AggregatedMetrics::F64(MetricData::Gauge(g)) => g
                .data_points()
                .find(|p| has_queue(p.attributes(), queue))
                .map(|p| p.value()),
            _ => None,
        };
        assert_eq!(point(&exported, "t_level", level, "a"), Some(5.0));
        Ok(())
    }
}
