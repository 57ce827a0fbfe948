# corelog — common tasks. `make test` is what CI runs (through .ci/run).

CARGO ?= cargo
# `make fuzz SECONDS=N` runs each target N seconds; FUZZ_SECONDS is the older name.
FUZZ_SECONDS ?= 30
SECONDS ?= $(FUZZ_SECONDS)
FUZZ_TARGETS = frame batch_decode api_versions metadata create_topics delete_topics \
	describe_topics produce fetch list_offsets init_producer_id describe_shards find_coordinator join_group \
	heartbeat leave_group offset_commit offset_fetch list_groups describe_groups delete_groups \
	reset_offsets write_audit audit_record group_record controller_raft broker_register \
	broker_heartbeat metadata_fetch controller_operation replica_push replica_query replica_stream \
	describe_cluster describe_cluster_v1 describe_cluster_v2 describe_groups_v1 partition_report partition_report_v1 authenticate describe_users alter_users \
	describe_acls alter_acls describe_quotas alter_quotas alter_cluster
# Fuzz targets of broker/fuzz: arbitrary frames against an in-process broker, and
# recovery of the controller log file.
BROKER_FUZZ_TARGETS = handler controller_log
# The pure code (scripts/purity.sh): no I/O, clock, process or thread in any
# item outside `#[cfg(test)]`. A crate's folder (wire) also may have no async
# runtime in its dependency tree; a file or folder inside another crate (the
# pure parts of an I/O crate) has its code checked. Add paths here. Of the
# storage crate: the group-commit state machine, the retention and prune
# planners, and the codecs of its small files and indexes.
STORAGE = broker/storage/src
PURE_PATHS = wire replication controller \
	$(STORAGE)/appender.rs $(STORAGE)/retention.rs $(STORAGE)/log/prune.rs \
	$(STORAGE)/checkpoint.rs $(STORAGE)/deletion_ledger.rs $(STORAGE)/sealed.rs \
	$(STORAGE)/index.rs $(STORAGE)/time_index.rs

.PHONY: build run test sim bench bench-storage bench-broker bench-cluster bench-matrix cluster cluster-down \
	cluster-status fmt lint purity fuzz clean nemesis soak ops-check

# The one release build: corelogd, corelog, the bench and the nemesis
# rig. Every target that needs release binaries runs exactly this command
# (so do scripts/cluster.sh and the bench scripts): cargo unifies
# dependency features over the packages a command selects, and a build of
# `-p corelog-broker` alone after `--workspace` recompiled for 84 s with
# another feature set. tests/tests/release_builds.rs keeps them equal.
RELEASE_BUILD = $(CARGO) build --release --workspace

build:
	$(RELEASE_BUILD)

# A broker on 127.0.0.1:7100 (metrics on :7180) keeping data in ./data;
# the same build gives the CLI, ./target/release/corelog.
run:
	$(RELEASE_BUILD)
	./target/release/corelogd $(ARGS)

# Three brokers on 127.0.0.1:7201-7203 (metrics :7301-7303), all controller
# voters, data and logs in target/cluster; returns once every broker is
# registered and unfenced. See scripts/cluster.sh (BASE_PORT, CLUSTER_DIR).
cluster:
	$(RELEASE_BUILD)
	NO_BUILD=1 ./scripts/cluster.sh up 3

cluster-down:
	./scripts/cluster.sh down

cluster-status:
	./scripts/cluster.sh status

# The test build of corelogd, with storage fault hooks (durable ledger, EIO by
# signal): its own profile and target directory, target/fault-injection/, so
# that target/{debug,release}/corelogd never carry the hooks. The tests and the
# nemesis run it; it refuses to start without a test harness.
TEST_BROKER = $(CARGO) build --profile fault-injection -p corelog-broker \
	--features fault-injection --bin corelogd

# The operator's files first (seconds). Binaries next: the multi-process
# tests in tests/ start corelogd and corelog. The replication simulation runs
# its 2,000 seeds in release mode (seconds, not minutes), so the debug run of
# the workspace leaves it out.
test:
	$(MAKE) ops-check
	$(CARGO) build --workspace --bins --examples
	$(TEST_BROKER)
	$(CARGO) test --workspace --exclude corelog-sim
	$(CARGO) test -p corelog-sim --release
	$(MAKE) nemesis

# The Grafana dashboard and Prometheus alerts of ops/ (README, "Dashboards and
# alerts"): promtool checks the rules, runs their unit tests (each alert fires
# on synthetic series, ops/prometheus/alerts_test.yml) and checks the example
# scrape configuration. tests/tests/ops.rs, run by `cargo test`, checks that a
# real cluster serves every metric the dashboard and the rules query, and
# tests/tests/metrics_format.rs runs `promtool check metrics` on a live
# broker's /metrics (so the tests need promtool too).
PROMTOOL ?= promtool
ops-check:
	@command -v $(PROMTOOL) >/dev/null 2>&1 || { \
		echo "ops-check: $(PROMTOOL) is missing; install it: apt-get install prometheus" >&2; exit 1; }
	$(PROMTOOL) check rules ops/prometheus/alerts.yml
	$(PROMTOOL) test rules ops/prometheus/alerts_test.yml
	$(PROMTOOL) check config ops/prometheus/prometheus.yml

# Fault injection (tests/src/bin/nemesis/): a fresh 3-broker cluster behind
# fault proxies in a private network namespace, the `corelog verify`
# workload, and a seeded schedule of kills, pauses, power losses, network
# cuts, proxy chaos, EIO, a full disk and file corruption, then the history
# checker. About 5 minutes and 40+ faults; exits non-zero on any violation
# and prints the command that replays its schedule. It runs the test build of
# corelogd (TEST_BROKER).
# NEMESIS_SEED=N replays a schedule; `make soak MINUTES=N` runs a long one,
# secured (TLS, the workload logged in with SCRAM and held to ACLs; the
# proxies' frame-level chaos cannot see inside TLS, which `make nemesis`
# keeps covering in plaintext). SOAK_FLAGS= runs it in plaintext.
NEMESIS_SECONDS ?= 300
MINUTES ?= 30
SOAK_FLAGS ?= --secured
NEMESIS = ./target/release/corelog-nemesis $(if $(NEMESIS_SEED),--seed $(NEMESIS_SEED))
nemesis:
	$(RELEASE_BUILD)
	$(TEST_BROKER)
	$(NEMESIS) --duration $(NEMESIS_SECONDS) --report target/nemesis-report.json \
		--broker-logs target/nemesis-logs

soak:
	$(RELEASE_BUILD)
	$(TEST_BROKER)
	$(NEMESIS) $(SOAK_FLAGS) --duration $$(( $(MINUTES) * 60 )) --report target/soak-report.json \
		--history target/soak-history.jsonl --broker-logs target/soak-logs

# Deterministic replication simulation (sim/): `make sim SEEDS=N` runs N seeds
# from SIM_FIRST_SEED (default 0) on every core; `make sim SEED=N` replays seed
# N alone with its event trace. A failing seed prints `make sim SEED=N`.
SEEDS ?= 2000
SIM_FIRST_SEED ?= 0
SIM_TEST = $(CARGO) test -p corelog-sim --release --test sim -- --exact replay --nocapture
sim:
ifdef SEED
	SIM_SEED=$(SEED) SIM_TRACE=1 $(SIM_TEST)
else
	SIM_SEEDS=$(SEEDS) SIM_FIRST_SEED=$(SIM_FIRST_SEED) $(SIM_TEST)
endif

# Storage engine against the raw disk, then the seed's workload on a broker.
bench: bench-storage bench-broker

# The storage engine against the raw durable bandwidth of the same disk.
bench-storage:
	$(RELEASE_BUILD)
	./target/release/corelog-bench storage $(ARGS)

# 100,000 x 1 KiB records/s for 60 s over 16 partitions, a 200,000/s peak,
# then producer and consumer together; see scripts/bench-broker.sh.
bench-broker:
	./scripts/bench-broker.sh

# A fresh local 3-broker cluster, a 16-partition topic with replication
# factor 3, then 1 KiB records at 100,000/s for 60 s with acks=quorum:
# throughput, append latency and replica lag (RATE=, DURATION= to change);
# then FAILOVER_ROUNDS (3) leader kills: kill -9 to the first append the new
# leader acknowledges.
bench-cluster:
	./scripts/bench-cluster.sh

# The cost matrix (corelog-bench matrix): producers {1, 4, 64} x partitions
# {16, 256, 1024} x replication factor {1, 3} on fresh local clusters, 30 s at
# 100,000/s then 10 s at 200,000/s per cell; about 20 minutes per build.
# BUILDS="old=DIR new=DIR" runs builds side by side (each DIR holds corelogd,
# corelog and corelog-bench); ARGS= passes more options (--rounds, --producers,
# --partitions, --replication-factors, --duration, ...).
bench-matrix:
	$(RELEASE_BUILD)
	./target/release/corelog-bench matrix $(foreach build,$(BUILDS),--build $(build)) $(ARGS)

fmt:
	$(CARGO) fmt --all

lint: purity
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p corelog-broker --features fault-injection --all-targets -- -D warnings

purity:
	@./scripts/purity.sh $(PURE_PATHS)

# Every decoder's fuzz target, then the broker's request-handler target,
# SECONDS each. cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP enables
# them on the stable toolchain. The handler target stops and restarts
# in-process brokers, and glommio keeps some memory of a stopped executor
# (the last broker is never stopped): leak detection is off there.
fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd wire/fuzz && for target in $(FUZZ_TARGETS); do \
		mkdir -p corpus/$$target seeds/$$target; \
		RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$target corpus/$$target seeds/$$target -- \
			-max_total_time=$(SECONDS) || exit 1; \
	done
	cd broker/fuzz && for target in $(BROKER_FUZZ_TARGETS); do \
		mkdir -p corpus/$$target seeds/$$target; \
		ASAN_OPTIONS=detect_leaks=0 RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$target \
			corpus/$$target seeds/$$target -- \
			-max_total_time=$(SECONDS) -timeout=60 -detect_leaks=0 || exit 1; \
	done

clean:
	$(CARGO) clean
