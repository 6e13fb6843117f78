//! Layouts against the seeds' and RFC 9562's worked examples; encode/decode and text round trips
//! for every scheme; `js53`'s widths: every sum but 53 refused, every id of its life at most
//! 2^53 − 1; the generator against random clocks (steps back included) and a model
//! high-water mark: stamps above the floor, never above the mark, strictly increasing ids and
//! texts, bounded borrowing.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// 2026-11-30T00:00:00Z.
const NOW_MS: u64 = 1_795_996_800_000;

fn date(y: u64, m: u64, d: u64) -> u64 {
    unix_ms_of_date(y, m, d).expect("a valid date")
}

/// Every scheme with its defaults, except `uid-generator` (whose default ran out) from 2025.
fn default_layout(scheme: Scheme) -> Layout {
    let mut spec = LayoutSpec::of(scheme);
    if scheme == Scheme::UidGenerator {
        spec.epoch_ms = Some(date(2025, 1, 1));
    }
    spec.load(NOW_MS).expect("a valid layout")
}

/// Any scheme; `uid-generator` and `js53` with random widths (a short sequence exercises
/// borrowing; `js53` with 36 to 46 bits of ms from 2025, which last past [`NOW_MS`]).
fn arb_layout() -> impl Strategy<Value = Layout> {
    (0..Scheme::ALL.len(), 30u32..=40, 1u32..=13).prop_map(|(i, time_bits, seq_bits)| {
        let scheme = Scheme::ALL[i];
        let (time_bits, seq_bits, id_bits) = match scheme {
            Scheme::UidGenerator => (time_bits, seq_bits, 63),
            Scheme::Js53 => (time_bits + 6, seq_bits.min(JS53_BITS - time_bits - 6), JS53_BITS),
            _ => return default_layout(scheme),
        };
        LayoutSpec {
            epoch_ms: Some(date(2025, 1, 1)),
            time_bits: Some(time_bits),
            seq_bits: Some(seq_bits),
            worker_bits: Some(id_bits - time_bits - seq_bits),
            ..LayoutSpec::of(scheme)
        }
        .load(NOW_MS)
        .expect("a valid layout")
    })
}

/// Random fields that fit `layout` (masking keeps each uniform over its range).
fn fields_for(layout: &Layout, raw: [u64; 7]) -> Fields {
    let mut fields = Fields::default();
    for (part, r) in Fields::PARTS.into_iter().zip(raw) {
        fields.set(part, r & layout.max_value(part));
    }
    fields
}

#[test]
fn uid_generator_default_ran_out_in_2024() {
    let spec = LayoutSpec::of(Scheme::UidGenerator);
    let err = spec.load(NOW_MS).expect_err("28 bits of seconds from 2016-05-20 ran out");
    let LayoutError::RunOut { ran_out, time_bits: 28, unit: TimeUnit::Seconds, .. } = &err else {
        panic!("expected RunOut, got {err:?}");
    };
    assert_eq!(ran_out, "2024-11-20T21:24:16.000Z");
    assert!(err.to_string().contains("8.5 years"), "{err}");

    // The same layout loaded in 2019 decodes seed 001's example id.
    let layout = spec.load(date(2019, 5, 3)).expect("valid in 2019");
    assert_eq!(layout.runs_out_at_ms(), date(2024, 11, 20) + 77_056_000);
    let fields = layout.decode(3_200_169_789_968_523_265).expect("a valid id");
    assert_eq!((fields.worker, fields.sequence), (21, 1));
    assert_eq!(rfc3339_ms(layout.unix_ms(fields.time)), "2019-05-02T23:26:39.000Z");

    // Seed 001's suggestion for long use: 31 bits of seconds last 68 years.
    let toml = "scheme = \"uid-generator\"\nepoch_ms = 1735689600000\ntime_bits = 31\n\
                worker_bits = 23\nseq_bits = 9\n";
    let spec: LayoutSpec = toml::from_str(toml).expect("a layout spec");
    let layout = spec.load(NOW_MS).expect("valid");
    assert_eq!(layout.lifetime_years().round(), 68.0);
    assert_eq!((layout.max_value(Part::Worker), layout.max_sequence()), ((1 << 23) - 1, 511));
}

#[test]
fn default_lifetimes() {
    let until = |s| rfc3339_ms(default_layout(s).runs_out_at_ms());
    assert_eq!(until(Scheme::Snowflake), "2080-07-10T17:30:30.209Z");
    // Seed 000: "42 bits ... up to the year 2109".
    assert_eq!(until(Scheme::RongCloud), "2109-05-15T07:35:11.104Z");
    assert!(until(Scheme::UuidV7).starts_with("10889-"));
    assert!(until(Scheme::Weibo).starts_with("2091-"));
    // As long as a snowflake's: 41 bits of ms, from 2025.
    assert_eq!(until(Scheme::Js53), "2094-09-07T15:47:35.552Z");
    let snowflake = default_layout(Scheme::Snowflake);
    assert_eq!(format!("{:.1}", snowflake.lifetime_years()), "69.7");
    assert_eq!(
        snowflake.describe_range(),
        "lasts 69.7 years from 2010-11-04T01:42:54.657Z, until 2080-07-10T17:30:30.209Z"
    );
}

#[test]
fn invalid_layouts_are_refused() {
    let uid = |t, w, s| LayoutSpec {
        epoch_ms: Some(date(2025, 1, 1)),
        time_bits: Some(t),
        worker_bits: Some(w),
        seq_bits: Some(s),
        ..LayoutSpec::of(Scheme::UidGenerator)
    };
    let err = uid(31, 23, 10).load(NOW_MS).expect_err("65 bits");
    assert!(matches!(err, LayoutError::WidthSum { sum: 65, bits: 64, .. }), "{err}");
    assert!(err.to_string().contains("sign 1 + time 31 + worker 23 + sequence 10"), "{err}");
    let err = uid(40, 23, 0).load(NOW_MS).expect_err("no sequence");
    assert!(matches!(err, LayoutError::ZeroWidth { part: Part::Sequence, .. }), "{err}");
    let err = uid(0, 50, 13).load(NOW_MS).expect_err("no time");
    assert!(matches!(err, LayoutError::ZeroWidth { part: Part::Time, .. }), "{err}");
    assert!(uid(40, 0, 23).load(NOW_MS).is_ok(), "a single worker needs no worker bits");
    let err = uid(u32::MAX, u32::MAX, u32::MAX).load(NOW_MS).expect_err("overflowing widths");
    assert!(matches!(err, LayoutError::WidthSum { .. }), "{err}");

    let future = LayoutSpec { epoch_ms: Some(NOW_MS + 1), ..LayoutSpec::of(Scheme::Snowflake) };
    let err = future.load(NOW_MS).expect_err("epoch in the future");
    assert!(matches!(err, LayoutError::EpochInFuture { .. }), "{err}");
    let widths = LayoutSpec { time_bits: Some(42), ..LayoutSpec::of(Scheme::Weibo) };
    assert_eq!(widths.load(NOW_MS), Err(LayoutError::FixedWidths(Scheme::Weibo)));
    let epoch = LayoutSpec { epoch_ms: Some(1), ..LayoutSpec::of(Scheme::UuidV7) };
    assert_eq!(epoch.load(NOW_MS), Err(LayoutError::FixedTime));
    let unit = LayoutSpec { unit: Some(TimeUnit::Seconds), ..LayoutSpec::of(Scheme::UuidV7) };
    assert_eq!(unit.load(NOW_MS), Err(LayoutError::FixedTime));
    // A ms snowflake from the Unix epoch ran out in 2039 (seed 003).
    let unix = LayoutSpec { epoch_ms: Some(0), ..LayoutSpec::of(Scheme::Snowflake) };
    assert!(unix.load(date(2039, 9, 7)).is_ok());
    assert!(matches!(unix.load(date(2039, 9, 8)), Err(LayoutError::RunOut { .. })));

    assert_eq!("weibo".parse(), Ok(Scheme::Weibo));
    assert!(matches!("twitter".parse::<Scheme>(), Err(LayoutError::UnknownScheme(_))));
    assert!(toml::from_str::<LayoutSpec>("scheme = \"snowflake\"\nepoch = 1\n").is_err());
    assert_eq!(unix_ms_of_date(2023, 2, 29), None);
}

#[test]
fn weibo_seed_example() {
    // Seed 003's run: diffTime=54767209, serverId=1, workerId (business)=2, sequence 1.
    let layout = default_layout(Scheme::Weibo);
    let fields =
        Fields { time: 54_767_209, worker: 1, business: 2, sequence: 1, ..Fields::default() };
    assert_eq!(layout.encode_u64(&fields), Ok(229_710_323_916_801));
    assert_eq!(layout.decode(229_710_323_916_801), Ok(fields));
    assert_eq!(rfc3339_ms(layout.unix_ms(fields.time)), "2021-11-12T15:12:47.209Z");
}

#[test]
fn uuidv7_rfc9562_example() {
    // RFC 9562 Appendix A.6.
    let layout = default_layout(Scheme::UuidV7);
    let id = layout.parse("017F22E2-79B0-7CC3-98C4-DC0C0C07398F").expect("the RFC's example");
    let fields = layout.decode(id).expect("valid");
    assert_eq!(fields.time, 0x017F_22E2_79B0);
    assert_eq!(fields.sequence, 0xCC3);
    assert_eq!(fields.rand, 0x18C4_DC0C_0C07_398F);
    assert_eq!(rfc3339_ms(fields.time), "2022-02-22T19:22:22.000Z");
    assert_eq!(layout.format(id), Ok("017f22e2-79b0-7cc3-98c4-dc0c0c07398f".to_string()));
    assert_eq!(layout.encode(&fields), Ok(id));
    assert_eq!(
        layout.encode_u64(&fields),
        Err(FieldError::NotU64 { scheme: Scheme::UuidV7, bits: 128 })
    );

    let v4 = layout.parse("017f22e2-79b0-4cc3-98c4-dc0c0c07398f");
    assert!(matches!(v4, Err(DecodeError::BadConstant { part: Part::Version, found: 4, .. })));
    let variant = layout.decode(id ^ (1 << 63));
    assert!(matches!(variant, Err(DecodeError::BadConstant { part: Part::Variant, .. })));
    for bad in ["017f22e2-79b0-7cc3-98c4-dc0c0c07398", "017f22e2x79b0-7cc3-98c4-dc0c0c07398f"] {
        assert!(matches!(layout.parse(bad), Err(DecodeError::Text { .. })), "{bad}");
    }
}

#[test]
fn rongcloud_text_form() {
    let layout = default_layout(Scheme::RongCloud);
    assert_eq!(layout.format(0), Ok("2222-2222-2222-2222".to_string()));
    assert_eq!(layout.format(1), Ok("2222-2222-2222-2223".to_string()));
    assert_eq!(layout.format((1 << 80) - 1), Ok("ZZZZ-ZZZZ-ZZZZ-ZZZZ".to_string()));
    assert!(matches!(layout.format(1 << 80), Err(DecodeError::TooWide { bits: 80, .. })));

    // Seed 000 §5's bit order: ms, then spin id, then session type, then the 22-bit hash.
    let fields = Fields {
        time: 1_571_000_000_000,
        sequence: 4095,
        session_type: 3,
        session_hash: 0x2A_BCDE,
        ..Fields::default()
    };
    let id = layout.encode(&fields).expect("fits");
    assert_eq!(id, (1_571_000_000_000u128 << 38) | (4095 << 26) | (3 << 22) | 0x2A_BCDE);
    let text = layout.format(id).expect("valid");
    assert_eq!(layout.parse(&text), Ok(id));
    assert_eq!(layout.parse(&text.to_lowercase()), Ok(id));
    let worker = Fields { worker: 1, ..fields };
    assert!(matches!(
        layout.encode(&worker),
        Err(FieldError::NoSuchField { part: Part::Worker, .. })
    ));

    // Seed 000's samples use 1, I and O, which its alphabet leaves out (see RONGCLOUD_ALPHABET).
    for sample in ["BD8U-DG1U-5UI5-L789", "BD8U-FCOJ-LDC5-L789"] {
        let err = layout.parse(sample).expect_err("outside the alphabet");
        assert!(err.to_string().contains("are left out"), "{err}");
    }
    assert!(layout.parse("BD8U-DGXU-5UZ5-L789").is_ok());
    assert!(layout.parse("BD8UDGXU-5UZ5-L789-").is_err());
}

#[test]
fn too_wide_fields_are_refused() {
    let layout = default_layout(Scheme::Snowflake);
    let err = layout.encode(&Fields { worker: 1024, ..Fields::default() });
    assert_eq!(
        err,
        Err(FieldError::TooWide {
            scheme: Scheme::Snowflake,
            part: Part::Worker,
            value: 1024,
            bits: 10,
            max: 1023
        })
    );
    let err = layout.encode(&Fields { business: 1, ..Fields::default() });
    assert!(matches!(err, Err(FieldError::NoSuchField { part: Part::Business, .. })));
    assert!(matches!(layout.parse("-1"), Err(DecodeError::Text { .. })));
    let sign = layout.decode(1 << 63);
    assert!(matches!(sign, Err(DecodeError::BadConstant { part: Part::Sign, found: 1, .. })));
}

#[test]
fn clock_back_keeps_the_last_timestamp() {
    let layout = default_layout(Scheme::Snowflake);
    let mut g = Generator::new(&layout, 50, 2).expect("floor fits");
    let hw = 1_000;
    assert_eq!(g.next(100, hw), Ok(Next::Issue(Stamp { time: 100, sequence: 0 })));
    assert_eq!(g.next(90, hw), Ok(Next::Issue(Stamp { time: 100, sequence: 1 })));
    assert_eq!(g.next(95, hw), Ok(Next::Issue(Stamp { time: 100, sequence: 2 })));
    assert_eq!(g.next(101, hw), Ok(Next::Issue(Stamp { time: 101, sequence: 0 })));
    let stats = g.stats();
    assert_eq!((stats.issued, stats.clock_back_events, stats.borrowed_units), (4, 1, 0));
    assert_eq!(stats.max_lead, 10);
    // A clock past the persisted mark must wait for it to be raised.
    assert_eq!(g.next(2_000, hw), Ok(Next::RaiseHighWater(2_000)));
    assert_eq!(g.next(2_000, 2_100), Ok(Next::Issue(Stamp { time: 2_000, sequence: 0 })));
}

#[test]
fn exhausted_sequence_borrows_then_waits() {
    let spec = LayoutSpec {
        epoch_ms: Some(date(2025, 1, 1)),
        time_bits: Some(31),
        worker_bits: Some(31),
        seq_bits: Some(1),
        ..LayoutSpec::of(Scheme::UidGenerator)
    };
    let layout = spec.load(NOW_MS).expect("valid");
    let mut g = Generator::new(&layout, 0, 2).expect("floor fits");
    let issued: Vec<Next> = (0..6).map(|_| g.next(10, 1_000).expect("in range")).collect();
    let stamps: Vec<(u64, u64)> = vec![(10, 0), (10, 1), (11, 0), (11, 1), (12, 0), (12, 1)];
    let expected: Vec<Next> =
        stamps.into_iter().map(|(time, sequence)| Next::Issue(Stamp { time, sequence })).collect();
    assert_eq!(issued, expected);
    // Unit 13 would run 3 units ahead of the clock: wait until it reads 11.
    assert_eq!(g.next(10, 1_000), Ok(Next::WaitUntil(11)));
    assert_eq!(g.next(10, 12), Ok(Next::WaitUntil(11)));
    assert_eq!(g.next(11, 12), Ok(Next::RaiseHighWater(13)));
    assert_eq!(g.next(11, 1_000), Ok(Next::Issue(Stamp { time: 13, sequence: 0 })));
    assert_eq!(g.stats().borrowed_units, 3);
    assert_eq!(g.stats().max_lead, 2);
}

#[test]
fn generator_starts_above_the_floor_and_stops_at_the_end_of_time() {
    let layout = default_layout(Scheme::Snowflake);
    // A restart with the clock set back below the previous holder's mark.
    let mut g = Generator::new(&layout, 500, 10).expect("floor fits");
    assert_eq!(g.last_issued(), None);
    assert_eq!(g.next(400, 600), Ok(Next::WaitUntil(491)));
    assert_eq!(g.next(491, 600), Ok(Next::Issue(Stamp { time: 501, sequence: 0 })));
    assert_eq!(g.last_issued(), Some(Stamp { time: 501, sequence: 0 }));

    let max = layout.max_time();
    assert!(Generator::new(&layout, max, 10).is_err());
    let mut g = Generator::new(&layout, max - 1, 10).expect("one unit left");
    assert_eq!(g.next(max, u64::MAX), Ok(Next::Issue(Stamp { time: max, sequence: 0 })));
    assert_eq!(g.next(max + 1, u64::MAX), Err(GenError { max_time: max, wanted: max + 1 }));
    // The last unit's sequence runs out with no unit to borrow.
    let mut g = Generator::new(&layout, max - 1, 10).expect("one unit left");
    for _ in 0..=layout.max_sequence() {
        assert!(matches!(g.next(max, u64::MAX), Ok(Next::Issue(_))));
    }
    assert_eq!(g.next(max, u64::MAX), Err(GenError { max_time: max, wanted: max + 1 }));
}

/// One step of a random clock: how far it moves (back too) and how many ids are asked for.
fn arb_steps() -> impl Strategy<Value = Vec<(i64, usize)>> {
    proptest::collection::vec((-8i64..=10, 1usize..=40), 1..60)
}

proptest! {
    #[test]
    fn round_trip_every_scheme(layout in arb_layout(), raw in any::<[u64; 7]>()) {
        let fields = fields_for(&layout, raw);
        let id = layout.encode(&fields).expect("fields that fit");
        prop_assert!(layout.scheme().id_bits() == 128 || id >> layout.scheme().id_bits() == 0);
        prop_assert!(id <= layout.max_id(), "{} above the layout's largest id", id);
        if layout.scheme() == Scheme::Js53 {
            prop_assert!(id <= u128::from(JS_MAX_SAFE_INTEGER), "{} is not JavaScript-safe", id);
            prop_assert_eq!(layout.encode_u64(&fields).map(u128::from), Ok(id));
            prop_assert!(layout.js_safe());
        }
        prop_assert_eq!(layout.decode(id), Ok(fields));
        let text = layout.format(id).expect("a valid id");
        prop_assert_eq!(layout.parse(&text), Ok(id));
        if layout.scheme().id_bits() == 64 {
            prop_assert_eq!(layout.encode_u64(&fields).map(u128::from), Ok(id));
            prop_assert!(id < 1 << 63);
        }
    }

    #[test]
    fn fields_wider_than_their_part_are_refused(
        layout in arb_layout(),
        which in 0..Fields::PARTS.len(),
        excess in 1u64..=u64::MAX,
    ) {
        let part = Fields::PARTS[which];
        let max = layout.max_value(part);
        prop_assume!(max < u64::MAX);
        let mut fields = Fields::default();
        fields.set(part, max.saturating_add(excess));
        let err = layout.encode(&fields).expect_err("too wide");
        let refused_part = match err {
            FieldError::TooWide { part, .. }
            | FieldError::NoSuchField { part, .. }
            | FieldError::NotFixed { part, .. } => part,
            FieldError::NotU64 { .. } => Part::Sign,
        };
        prop_assert_eq!(refused_part, part);
    }

    /// A packer's ids are the layout's own encoding of the same fields, for every scheme.
    #[test]
    fn a_packer_packs_what_encode_encodes(
        layout in arb_layout(),
        raw in any::<[u64; 7]>(),
        time in any::<u64>(),
        sequence in any::<u64>(),
        random in any::<u64>(),
    ) {
        let random_bits = if layout.scheme() == Scheme::UuidV7 { UUID_RANDOM_BITS } else { 0 };
        let mut fixed = fields_for(&layout, raw);
        fixed.time = 0;
        fixed.sequence = 0;
        fixed.rand &= !((1u64 << random_bits) - 1);
        let packer = layout.packer(&fixed, random_bits).expect("fixed fields that fit");
        prop_assert_eq!(packer.takes_random(), random_bits > 0);
        let (time, sequence) = (time & layout.max_time(), sequence & layout.max_sequence());
        let fields = Fields {
            time,
            sequence,
            rand: fixed.rand | (random & ((1u64 << random_bits) - 1)),
            ..fixed
        };
        prop_assert_eq!(packer.pack(time, sequence, random), layout.encode(&fields).expect("fits"));
        // What varies per id is refused as a fixed field.
        let not_fixed = Fields { sequence: 1, ..fixed };
        prop_assert!(
            matches!(layout.packer(&not_fixed, random_bits), Err(FieldError::NotFixed { .. })),
            "a fixed sequence is refused"
        );
    }

    /// `next_run` issues exactly the stamps that single `next` calls with the same readings
    /// issue, and leaves the same state behind, under a random clock and high-water mark.
    #[test]
    fn runs_issue_what_single_steps_issue(
        layout in arb_layout(),
        floor_offset in -20i64..=20,
        max_ahead in 0u64..=5,
        window in 1u64..=50,
        steps in arb_steps(),
        run_max in 1u64..=9000,
    ) {
        let start = layout.units_at(NOW_MS);
        let floor = start.saturating_add_signed(floor_offset);
        let mut by_run = Generator::new(&layout, floor, max_ahead).expect("floor fits");
        let mut by_step = by_run.clone();
        let (mut now, mut high_water) = (start, floor);
        for (delta, calls) in steps {
            now = now.saturating_add_signed(delta);
            // Up to `calls` answers of each, `run_max` stamps per run at most.
            for _ in 0..calls {
                let answer = by_run.next_run(now, high_water, run_max).expect("far from the end");
                match answer {
                    NextRun::Issue(run) => {
                        prop_assert!(run.len >= 1 && run.len <= run_max);
                        for stamp in run.stamps() {
                            let step = by_step.next(now, high_water).expect("far from the end");
                            prop_assert_eq!(step, Next::Issue(stamp));
                        }
                    }
                    NextRun::WaitUntil(unit) => {
                        prop_assert_eq!(by_step.next(now, high_water), Ok(Next::WaitUntil(unit)));
                        break;
                    }
                    NextRun::RaiseHighWater(unit) => {
                        prop_assert_eq!(
                            by_step.next(now, high_water),
                            Ok(Next::RaiseHighWater(unit))
                        );
                        high_water = unit + window;
                    }
                }
                prop_assert_eq!(&by_run, &by_step);
            }
        }
    }

    /// RongCloud's alphabet is in ASCII order and UUID hex is lowercase, so texts sort like ids.
    #[test]
    fn texts_sort_like_numbers(raw_a in any::<[u64; 7]>(), raw_b in any::<[u64; 7]>()) {
        for scheme in [Scheme::RongCloud, Scheme::UuidV7] {
            let layout = default_layout(scheme);
            let a = layout.encode(&fields_for(&layout, raw_a)).expect("fits");
            let b = layout.encode(&fields_for(&layout, raw_b)).expect("fits");
            let (ta, tb) = (layout.format(a).expect("valid"), layout.format(b).expect("valid"));
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b), "{} vs {}", ta, tb);
        }
    }

    /// Random clock readings (steps back included) and a model of the persisted high-water
    /// mark, raised by `window` whenever the generator asks: ids never repeat or decrease.
    #[test]
    fn generator_ids_strictly_increase_under_a_random_clock(
        layout in arb_layout(),
        raw in any::<[u64; 7]>(),
        floor_offset in -20i64..=20,
        max_ahead in 0u64..=5,
        window in 1u64..=50,
        steps in arb_steps(),
    ) {
        let start = layout.units_at(NOW_MS);
        let floor = start.saturating_add_signed(floor_offset);
        let mut g = Generator::new(&layout, floor, max_ahead).expect("floor fits");
        let (mut now, mut high_water) = (start, floor);
        let worker = fields_for(&layout, raw);
        let mut seen = BTreeSet::new();
        let (mut last_id, mut last_text, mut last_stamp): (Option<u128>, Option<String>, Option<Stamp>) =
            (None, None, None);
        let mut clock_backs = 0;
        for (i, (delta, calls)) in steps.into_iter().enumerate() {
            let before = now;
            now = now.saturating_add_signed(delta);
            clock_backs += u64::from(i > 0 && now < before);
            for _ in 0..calls {
                match g.next(now, high_water).expect("far from the end of time") {
                    Next::Issue(stamp) => {
                        prop_assert!(stamp.time > floor, "{:?} at or below the floor {}", stamp, floor);
                        prop_assert!(stamp.time <= high_water);
                        let opened = last_stamp.is_none_or(|s| stamp.time > s.time);
                        if opened && stamp.time > now {
                            prop_assert!(stamp.time - now <= max_ahead, "borrowed too far");
                        }
                        prop_assert!(last_stamp.is_none_or(|s| stamp > s));
                        last_stamp = Some(stamp);
                        let fields = Fields { time: stamp.time, sequence: stamp.sequence, ..worker };
                        let id = layout.encode(&fields).expect("fits");
                        let text = layout.format(id).expect("valid");
                        prop_assert!(seen.insert(id), "id {} issued twice", id);
                        prop_assert!(last_id.is_none_or(|l| id > l));
                        if layout.scheme().id_bits() > 64 {
                            prop_assert!(last_text.as_ref().is_none_or(|l| text > *l));
                        }
                        last_id = Some(id);
                        last_text = Some(text);
                    }
                    Next::WaitUntil(until) => {
                        prop_assert!(until > now);
                        prop_assert_eq!(g.last_issued(), last_stamp, "waiting issues nothing");
                        break;
                    }
                    Next::RaiseHighWater(t) => {
                        prop_assert!(t > high_water);
                        prop_assert_eq!(g.last_issued(), last_stamp, "raising issues nothing");
                        high_water = t + window;
                    }
                }
            }
        }
        let stats = g.stats();
        prop_assert_eq!(stats.issued, seen.len() as u64);
        prop_assert_eq!(stats.clock_back_events, clock_backs);
        prop_assert!(stats.borrowed_units <= stats.issued);
    }
}

/// Session keys and hashes: Java's `String.hashCode()` low 22 bits ("hello" is 99162322;
/// "polygenelubricants" is i32::MIN, whose low 22 bits are 0), and keys refuse fields that do
/// not fit.
#[test]
fn session_keys_and_java_hashes() {
    assert_eq!(session_hash_of("hello"), 99_162_322 & (SESSION_HASHES - 1));
    assert_eq!(session_hash_of(""), 0);
    assert_eq!(session_hash_of("polygenelubricants"), 0);
    // Negative hashes keep their low bits: "Aa" and "BB" collide in Java (2112) as here.
    assert_eq!(session_hash_of("Aa"), session_hash_of("BB"));
    assert_eq!(session_hash_of("\u{1F600}"), (0xD83D * 31 + 0xDE00) & (SESSION_HASHES - 1));
    assert_eq!(session_key(3, 5), Some(3 << 22 | 5));
    assert_eq!(session_key(15, SESSION_HASHES - 1), Some((1 << 26) - 1));
    assert_eq!(session_key(16, 0), None);
    assert_eq!(session_key(0, SESSION_HASHES), None);
}

/// A shape is the fingerprint without its epoch (and without a `rongcloud` session range):
/// two epochs of one shape are one shape; two widths are two.
#[test]
fn shape_drops_the_epoch_and_the_session_range() {
    let snowflake = default_layout(Scheme::Snowflake);
    let mut spec = LayoutSpec::of(Scheme::Snowflake);
    spec.epoch_ms = Some(date(2020, 1, 1));
    let later_epoch = spec.load(NOW_MS).expect("a valid layout");
    assert_ne!(snowflake.fingerprint(), later_epoch.fingerprint());
    assert_eq!(snowflake.shape(), later_epoch.shape());
    assert_eq!(snowflake.shape(), "snowflake unit=ms sign 1 + time 41 + worker 10 + sequence 12");
    let rongcloud = default_layout(Scheme::RongCloud).fingerprint();
    let with_sessions = format!("{rongcloud}; sessions on uids [0, 100)");
    assert_eq!(shape_of_fingerprint(&with_sessions), shape_of_fingerprint(&rongcloud));
    let shapes: BTreeSet<String> = Scheme::ALL.iter().map(|&s| default_layout(s).shape()).collect();
    assert_eq!(shapes.len(), Scheme::ALL.len(), "every scheme's defaults are a shape of its own");
}

/// The `js53` preset: 41-bit ms + 5-bit worker + 7-bit sequence from 2025-01-01, 53 bits, so
/// its largest id — the last ms of its life, worker 31, sequence 127 — is exactly 2^53 − 1;
/// one more is not one of its ids. No other scheme's defaults are JavaScript-safe.
#[test]
fn js53_preset_stays_within_javascript_numbers() {
    let layout = default_layout(Scheme::Js53);
    assert_eq!(layout.epoch_ms(), JS53_EPOCH_MS);
    assert_eq!(rfc3339_ms(JS53_EPOCH_MS), "2025-01-01T00:00:00.000Z");
    assert_eq!(layout.parts(), &[(Part::Time, 41), (Part::Worker, 5), (Part::Sequence, 7)]);
    assert_eq!(JS_MAX_SAFE_INTEGER, 9_007_199_254_740_991, "Number.MAX_SAFE_INTEGER");
    assert_eq!(layout.max_id(), u128::from(JS_MAX_SAFE_INTEGER));
    assert!(layout.js_safe());
    assert_eq!(layout.ids_per_second(), 128_000);
    assert_eq!(worker_ids(&layout), 32);
    assert_eq!(format!("{:.1}", layout.lifetime_years()), "69.7");

    // The last ms of its life, at its place, sets bit 52 and none above.
    let last_ms = layout.runs_out_at_ms() - 1;
    assert_eq!(layout.units_at(last_ms), layout.max_time());
    let last =
        Fields { time: layout.units_at(last_ms), worker: 31, sequence: 127, ..Fields::default() };
    assert_eq!(layout.encode_u64(&last), Ok(JS_MAX_SAFE_INTEGER));
    assert_eq!(layout.decode(u128::from(JS_MAX_SAFE_INTEGER)), Ok(last));
    assert!(matches!(
        layout.decode(1 << 53),
        Err(DecodeError::TooWide { scheme: Scheme::Js53, bits: 53, .. })
    ));
    assert!(layout.parse("9007199254740992").is_err(), "2^53 is not a js53 id");
    assert_eq!(layout.parse("9007199254740991"), Ok(u128::from(JS_MAX_SAFE_INTEGER)));
    assert_eq!(layout.format(12_345), Ok("12345".to_string()));
    assert!(layout.encode(&Fields { time: layout.max_time() + 1, ..Fields::default() }).is_err());

    for scheme in Scheme::ALL.into_iter().filter(|&s| s != Scheme::Js53) {
        assert!(!default_layout(scheme).js_safe(), "{scheme}");
    }
    assert_eq!(default_layout(Scheme::Snowflake).max_id(), (1 << 63) - 1);
    assert_eq!(default_layout(Scheme::Snowflake).ids_per_second(), 4_096_000);
    assert_eq!(default_layout(Scheme::UidGenerator).ids_per_second(), 8_192);

    // Its config: the name alone, or with widths, unit and epoch of one's own.
    assert_eq!("js53".parse(), Ok(Scheme::Js53));
    let toml = "scheme = \"js53\"\nunit = \"s\"\ntime_bits = 32\nworker_bits = 5\nseq_bits = 16\n";
    let spec: LayoutSpec = toml::from_str(toml).expect("a layout spec");
    let seconds = spec.load(NOW_MS).expect("32 + 5 + 16 = 53");
    assert_eq!(seconds.ids_per_second(), 65_536);
    assert_eq!(seconds.lifetime_years().round(), 136.0);
    assert_eq!(seconds.max_id(), u128::from(JS_MAX_SAFE_INTEGER));
}

/// Every combination of widths up to 64 bits each: js53 loads only those that sum to 53 (and
/// give time and sequence a bit), and every one it loads tops out at exactly 2^53 − 1; every
/// other sum is refused naming the widths and the sum.
#[test]
fn js53_refuses_every_width_sum_but_53() {
    let spec = |t, w, s| LayoutSpec {
        time_bits: Some(t),
        worker_bits: Some(w),
        seq_bits: Some(s),
        ..LayoutSpec::of(Scheme::Js53)
    };
    let mut loaded = 0;
    for t in 0..=64u32 {
        for w in 0..=64u32 {
            for s in 0..=64u32 {
                let result = spec(t, w, s).load_shape();
                let sum = u64::from(t + w + s);
                match result {
                    Ok(layout) => {
                        assert_eq!(sum, 53, "{t} + {w} + {s} loaded");
                        assert_eq!(layout.max_id(), u128::from(JS_MAX_SAFE_INTEGER), "{t}+{w}+{s}");
                        loaded += 1;
                    }
                    Err(LayoutError::NotJsSafe { sum: refused, widths }) => {
                        assert_ne!(sum, 53, "{t} + {w} + {s} refused");
                        assert_eq!(refused, sum);
                        let named = format!("time {t} + worker {w} + sequence {s}");
                        assert_eq!(widths, named);
                    }
                    Err(LayoutError::ZeroWidth { .. }) => {
                        assert!(sum == 53 && (t == 0 || s == 0), "{t} + {w} + {s}");
                    }
                    Err(other) => panic!("{t} + {w} + {s}: {other}"),
                }
            }
        }
    }
    // t ≥ 1, s ≥ 1, w ≥ 0 with t + w + s = 53: 52 + 51 + ... + 1.
    assert_eq!(loaded, 52 * 53 / 2);

    let err = spec(41, 6, 7).load(NOW_MS).expect_err("54 bits");
    assert_eq!(
        err.to_string(),
        "js53: the widths (time 41 + worker 6 + sequence 7) sum to 54 bits, but its ids have \
         exactly 53 so that none ever exceeds 2^53 - 1 = 9007199254740991 (JavaScript's \
         Number.MAX_SAFE_INTEGER) in the layout's whole life; choose time_bits + worker_bits + \
         seq_bits = 53"
    );
    let err = spec(u32::MAX, u32::MAX, u32::MAX).load(NOW_MS).expect_err("overflowing widths");
    assert!(matches!(err, LayoutError::NotJsSafe { .. }), "{err}");
    // Default widths for what is not given: 41 + 5 + 8 = 54.
    let one_more = LayoutSpec { seq_bits: Some(8), ..LayoutSpec::of(Scheme::Js53) };
    assert!(matches!(one_more.load(NOW_MS), Err(LayoutError::NotJsSafe { sum: 54, .. })));
    // 53 bits that ran out are refused as any layout that ran out.
    let short = spec(30, 16, 7).load(NOW_MS).expect_err("2^30 ms is 12 days");
    assert!(matches!(short, LayoutError::RunOut { scheme: Scheme::Js53, .. }), "{short}");
    // The fixed-width schemes still take no widths, and say which do.
    let err = LayoutSpec { seq_bits: Some(7), ..LayoutSpec::of(Scheme::Snowflake) }.load(NOW_MS);
    let err = err.expect_err("snowflake's widths are fixed").to_string();
    assert!(err.contains("only uid-generator and js53 take"), "{err}");
}

proptest! {
    /// Random widths summing to 53 and random fields, at any time of the layout's life (its
    /// last unit included): the id is at most 2^53 − 1 and decodes to its fields.
    #[test]
    fn js53_ids_of_any_widths_and_time_are_javascript_safe(
        t in 1u32..=52,
        s_raw in 0u32..=64,
        raw in any::<[u64; 7]>(),
    ) {
        let s = 1 + s_raw % (53 - t); // 1..=53 - t
        let spec = LayoutSpec {
            time_bits: Some(t),
            worker_bits: Some(53 - t - s),
            seq_bits: Some(s),
            ..LayoutSpec::of(Scheme::Js53)
        };
        let layout = spec.load_shape().expect("53 bits");
        let fields = fields_for(&layout, raw);
        let id = layout.encode_u64(&fields).expect("fields that fit");
        prop_assert!(id <= JS_MAX_SAFE_INTEGER);
        prop_assert_eq!(layout.decode(u128::from(id)), Ok(fields));
    }
}
