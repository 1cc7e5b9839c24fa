//! The relister's settings: its periods, health threshold and channel capacity, and their defaults.

use std::num::NonZeroUsize;
use std::time::Duration;

/// Default period between two global relists.
pub const DEFAULT_RELIST_PERIOD: Duration = Duration::from_secs(1);
/// Default period between two global relists while a runtime event stream is healthy: the relist is
/// then only the safety net for an event the stream lost (BENCHMARKS.md, "Idle cost on containerd
/// 2.1", says why 30 s).
pub const DEFAULT_RELIST_PERIOD_WITH_TRIGGERS: Duration = Duration::from_secs(30);
/// Default threshold after which a PLEG that has not relisted is unhealthy.
pub const DEFAULT_RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// Default capacity of the event channel.
pub const DEFAULT_CHANNEL_CAPACITY: NonZeroUsize = NonZeroUsize::new(1000).unwrap();
/// Settings of the relister. Its periods keep their order (checked by [`PlegConfig::new`]): a
/// relister whose period reached its threshold would be unhealthy between two relists.
#[derive(Debug, Clone)]
pub struct PlegConfig {
    relist_period: Duration,
    relist_period_with_triggers: Duration,
    relist_threshold: Duration,
    channel_capacity: NonZeroUsize,
}

/// Relist periods out of order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPlegConfig {
    #[error("the relist period {period:?} must be less than the relist threshold {threshold:?}")]
    PeriodNotBelowThreshold { period: Duration, threshold: Duration },
    #[error(
        "the relist period with triggers {with_triggers:?} must be at least the relist period {period:?} and less than the relist threshold {threshold:?}"
    )]
    WithTriggersOutOfOrder {
        with_triggers: Duration,
        period: Duration,
        threshold: Duration,
    },
}

impl PlegConfig {
    /// A global relist every `relist_period`, every `relist_period_with_triggers` instead while a
    /// runtime event stream is healthy (None: no triggers, `relist_period` always), and unhealthy
    /// after `relist_threshold` without one. The periods must be below the threshold, and the
    /// period with triggers at least the other. The channel holds [`DEFAULT_CHANNEL_CAPACITY`].
    pub fn new(
        relist_period: Duration,
        relist_period_with_triggers: Option<Duration>,
        relist_threshold: Duration,
    ) -> Result<Self, InvalidPlegConfig> {
        if relist_period >= relist_threshold {
            return Err(InvalidPlegConfig::PeriodNotBelowThreshold {
                period: relist_period,
                threshold: relist_threshold,
            });
        }
        let with_triggers = relist_period_with_triggers.unwrap_or(relist_period);
        if with_triggers < relist_period || with_triggers >= relist_threshold {
            return Err(InvalidPlegConfig::WithTriggersOutOfOrder {
                with_triggers,
                period: relist_period,
                threshold: relist_threshold,
            });
        }
        Ok(Self {
            relist_period,
            relist_period_with_triggers: with_triggers,
            relist_threshold,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
        })
    }

    /// The same, with a channel of `capacity` lifecycle events to the syncLoop (and the syncLoop's
    /// own queue of as many).
    pub fn with_channel_capacity(self, capacity: NonZeroUsize) -> Self {
        Self {
            channel_capacity: capacity,
            ..self
        }
    }

    /// The wait before the next global relist, by whether the runtime event stream is healthy.
    pub fn period(&self, triggers_healthy: bool) -> Duration {
        if triggers_healthy {
            self.relist_period_with_triggers
        } else {
            self.relist_period
        }
    }

    /// The period of the global relist while no runtime event stream is healthy.
    pub fn relist_period(&self) -> Duration {
        self.relist_period
    }

    /// How long without a relist before the relister is unhealthy.
    pub fn relist_threshold(&self) -> Duration {
        self.relist_threshold
    }

    pub fn channel_capacity(&self) -> NonZeroUsize {
        self.channel_capacity
    }
}

impl Default for PlegConfig {
    fn default() -> Self {
        Self {
            relist_period: DEFAULT_RELIST_PERIOD,
            relist_period_with_triggers: DEFAULT_RELIST_PERIOD_WITH_TRIGGERS,
            relist_threshold: DEFAULT_RELIST_THRESHOLD,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_keeps_its_periods_in_order() {
        let s = Duration::from_secs;
        let config = PlegConfig::new(s(1), Some(s(30)), s(180)).unwrap();
        assert_eq!((config.period(false), config.period(true)), (s(1), s(30)));
        let without_triggers = PlegConfig::new(s(5), None, s(180)).unwrap();
        assert_eq!(without_triggers.period(true), s(5), "no triggers: one period");
        assert_eq!(
            PlegConfig::new(s(180), None, s(180)).unwrap_err(),
            InvalidPlegConfig::PeriodNotBelowThreshold {
                period: s(180),
                threshold: s(180)
            }
        );
        for with_triggers in [s(1) - Duration::from_nanos(1), s(180), s(3600)] {
            assert!(
                matches!(
                    PlegConfig::new(s(1), Some(with_triggers), s(180)),
                    Err(InvalidPlegConfig::WithTriggersOutOfOrder { .. })
                ),
                "{with_triggers:?}"
            );
        }
        assert_eq!(
            PlegConfig::default()
                .with_channel_capacity(NonZeroUsize::MIN)
                .channel_capacity(),
            NonZeroUsize::MIN
        );
    }
}
