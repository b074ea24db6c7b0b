# sluice — build, test, run, bench, check, fuzz, deps.
#
# Every .c under src/ is part of the program; every tests/unit/**/test_*.c is
# one cmocka binary linked against all of src/ but main.c and tests/certs.c
# (throwaway certificates); every tests/integration/test_*.c likewise, plus
# the harness (tests/integration/harness*.c).
# Adding a file never needs an edit here.

VERSION   := 0.1.0
PREFIX    ?= /usr/local
BUILD     ?= build
CC        ?= cc
PKGS      := libuv hiredis inih openssl
TEST_PKGS := cmocka

# Debian packages the build and the tests need; `make deps` installs what is missing.
DEB_BUILD := pkg-config libuv1-dev libhiredis-dev libinih-dev libcmocka-dev libssl-dev
DEB_TEST  := redis-server redis-tools
DEB_BENCH := haproxy nutcracker nginx-light libnginx-mod-stream wrk

OPT      ?= -O2 -g
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wformat=2 -Wno-format-nonliteral
SAN      ?=
# Recursive (=) so pkg-config runs only when a recipe needs it, after `deps`.
CFLAGS_ALL = -std=gnu11 $(OPT) $(WARN) $(SAN) -D_GNU_SOURCE -DSL_VERSION='"$(VERSION)"' \
             -Isrc -Ibuild/gen $(shell pkg-config --cflags $(PKGS)) $(CFLAGS)
LIBS       = $(shell pkg-config --libs $(PKGS)) -lm
TEST_LIBS  = $(shell pkg-config --libs $(TEST_PKGS))

SRC       := $(shell find src -name '*.c' | sort)
LIB_SRC   := $(filter-out src/main.c,$(SRC))
LUA       := $(wildcard lua/*.lua)
# The Lua scripts, embedded as C (lua/embed.sh).
GEN_SRC   := $(BUILD)/gen/lua_scripts.c
GEN_OBJ   := $(BUILD)/obj/gen/lua_scripts.o
OBJ       := $(SRC:%.c=$(BUILD)/obj/%.o) $(GEN_OBJ)
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(GEN_OBJ)
UNIT_SRC  := $(shell find tests/unit -name 'test_*.c' 2>/dev/null | sort)
UNIT_BIN  := $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%)
# Headers the unit tests share (tests/unit/**/*.h): an edit rebuilds them all.
UNIT_HDR  := $(shell find tests/unit -name '*.h' 2>/dev/null | sort)
INTEG_SRC := $(shell find tests/integration tests/lua -name 'test_*.c' 2>/dev/null | sort)
INTEG_BIN := $(INTEG_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_CERTS := tests/certs.c
HARNESS   := $(sort $(wildcard tests/integration/harness*.c)) $(TEST_CERTS)
HTTP_TEST    := $(BUILD)/tests/integration/test_http
RUN_INTEG    := $(INTEG_BIN)
FUZZ_SRC  := $(shell find tests/fuzz -name 'fuzz_*.c' 2>/dev/null | sort)
FUZZ_BIN  := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_SECONDS ?= 60

.PHONY: all test run bench check fuzz fuzz-diff fuzz-hostile deps deps-bench deps-http deps-deploy install deb clean \
        unit integration test-build test-redis-suite test-http bench-store

all: $(BUILD)/sluice

$(BUILD)/sluice: $(OBJ)
	$(CC) $(OPT) $(SAN) -o $@ $(OBJ) $(LIBS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c -o $@ $<

$(GEN_SRC): $(LUA) lua/embed.sh
	@mkdir -p $(dir $@)
	sh lua/embed.sh > $@

$(GEN_OBJ): $(GEN_SRC) src/store/scripts.h src/store/store.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c -o $@ $<

-include $(OBJ:.o=.d)

# ---- tests -------------------------------------------------------------

$(BUILD)/tests/unit/%: tests/unit/%.c $(UNIT_HDR) $(TEST_CERTS) tests/certs.h $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(TEST_CERTS) $(LIB_OBJ) $(LIBS) $(TEST_LIBS)

# Integration and Lua tests: real processes, started through the harness.
$(BUILD)/tests/integration/%: tests/integration/%.c $(HARNESS) tests/integration/harness.h tests/certs.h $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(HARNESS) $(LIB_OBJ) $(LIBS) $(TEST_LIBS)
# test_adaptive starts the benchmark upstream next to the sluice binary.
$(BUILD)/tests/integration/test_adaptive: $(BUILD)/bench/capsrv
$(BUILD)/tests/lua/%: tests/lua/%.c $(HARNESS) tests/integration/harness.h $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(HARNESS) $(LIB_OBJ) $(LIBS) $(TEST_LIBS)

test-build: $(BUILD)/sluice $(UNIT_BIN) $(INTEG_BIN)

# `make test`: install what is missing, then build and run everything in a sub-make
# (so pkg-config is asked only after the packages are there).
test: deps deps-http deps-deploy
	@$(MAKE) --no-print-directory test-build
	@tests/run.sh $(UNIT_BIN) $(RUN_INTEG)

# The HTTP tests alone (real nginx, tests/integration/http_upstream.py, curl,
# Python's http.client); HTTP_ONLY=<cmocka pattern> picks tests.
test-http: deps deps-http
	@$(MAKE) --no-print-directory $(BUILD)/sluice $(HTTP_TEST)
	@tests/run.sh $(HTTP_TEST)

unit: deps
	@$(MAKE) --no-print-directory $(UNIT_BIN)
	@tests/run.sh $(UNIT_BIN)

integration: deps
	@$(MAKE) --no-print-directory $(BUILD)/sluice $(INTEG_BIN)
	@tests/run.sh $(RUN_INTEG)

# AddressSanitizer + UndefinedBehaviorSanitizer build of everything, in its own tree.
check: deps deps-http deps-deploy
	@$(MAKE) --no-print-directory BUILD=build/san OPT='-O1 -g -fno-omit-frame-pointer' \
	    SAN='-fsanitize=address,undefined -fno-sanitize-recover=undefined' test-build
	@SLUICE_BIN=build/san/sluice ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    tests/run.sh $(subst $(BUILD)/,build/san/,$(UNIT_BIN) $(RUN_INTEG))

# libFuzzer targets, built with clang against a clang build of src/.
FUZZ_CC   := clang-14
FUZZ_OBJ  := $(LIB_SRC:%.c=$(BUILD)/fuzzobj/%.o) $(BUILD)/fuzzobj/gen/lua_scripts.o
$(BUILD)/fuzzobj/gen/lua_scripts.o: $(GEN_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_ALL) -O1 -g -fsanitize=fuzzer-no-link,address,undefined -c -o $@ $<
$(BUILD)/fuzzobj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_ALL) -O1 -g -fsanitize=fuzzer-no-link,address,undefined -c -o $@ $<
$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_ALL) -O1 -g -fsanitize=fuzzer,address,undefined -o $@ $< $(FUZZ_OBJ) $(LIBS)

fuzz: deps
	@command -v $(FUZZ_CC) >/dev/null && [ -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ] || \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y clang-14 libclang-rt-14-dev
	@$(MAKE) --no-print-directory CC=$(FUZZ_CC) WARN='-Wall -Wextra' $(FUZZ_BIN)
	@failed=0; for f in $(FUZZ_BIN); do n=$$(basename $$f); \
	    mkdir -p $(BUILD)/corpus/$$n $(BUILD)/fuzz-artifacts; \
	    seeds=; [ -d tests/fuzz/corpus/$$n ] && seeds=tests/fuzz/corpus/$$n; \
	    echo "== $$n ($(FUZZ_SECONDS)s)"; \
	    if $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	        -artifact_prefix=$(BUILD)/fuzz-artifacts/$$n- $(BUILD)/corpus/$$n $$seeds \
	        > $(BUILD)/fuzz-$$n.log 2>&1; then tail -n 6 $(BUILD)/fuzz-$$n.log; \
	    else tail -n 40 $(BUILD)/fuzz-$$n.log; echo "!! $$n failed (log: $(BUILD)/fuzz-$$n.log)"; failed=1; fi; \
	done; exit $$failed

# The differential RESP fuzzer (tests/fuzz/diff_resp.c): every stream to Redis
# directly and through sluice, replies compared. `make fuzz-diff` runs it for
# FUZZ_SECONDS against the ASan + UBSan build of sluice (DIFF_ARGS adds options,
# e.g. DIFF_ARGS='--seed 7 --keep-going'), then as long in its pooled mode:
# rounds of DIFF_POOLED concurrent clients through an upstream_pool listener
# (DIFF_POOLED=0 skips it); a short seeded run of both is part of `make test`
# (tests/integration/test_diff_resp.c).
DIFF_POOLED ?= 8
DIFF_BIN := $(BUILD)/tests/fuzz/diff_resp
# diff_resp.c includes the others (diff_resp_*.c): one translation unit, built from it alone.
DIFF_SRC := $(sort $(wildcard tests/fuzz/diff_resp*.c))
$(DIFF_BIN): tests/fuzz/diff_resp.c $(DIFF_SRC) $(HARNESS) tests/integration/harness.h $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(HARNESS) $(LIB_OBJ) $(LIBS)
$(BUILD)/tests/integration/test_diff_resp: $(DIFF_SRC)

fuzz-diff: deps
	@$(MAKE) --no-print-directory BUILD=build/san OPT='-O1 -g -fno-omit-frame-pointer' \
	    SAN='-fsanitize=address,undefined -fno-sanitize-recover=undefined' build/san/sluice
	@$(MAKE) --no-print-directory $(DIFF_BIN)
	SLUICE_BIN=build/san/sluice $(DIFF_BIN) --seconds $(FUZZ_SECONDS) --out $(BUILD)/diff-resp $(DIFF_ARGS)
	@[ "$(DIFF_POOLED)" = 0 ] || { set -x; SLUICE_BIN=build/san/sluice $(DIFF_BIN) --pooled $(DIFF_POOLED) \
	    --seconds $(FUZZ_SECONDS) --out $(BUILD)/diff-resp-pooled $(DIFF_ARGS); }

# Hostile HTTP clients and upstreams at random (tests/integration/http_hostile.py):
# `make test` runs one fixed seed and number of cases; `make fuzz-hostile` a new
# seed for FUZZ_SECONDS against the ASan + UBSan build (HOSTILE_SEED=N picks one).
# A failure prints the line that replays it.
HOSTILE_SEED ?= random
fuzz-hostile: deps deps-http
	@$(MAKE) --no-print-directory BUILD=build/san OPT='-O1 -g -fno-omit-frame-pointer' \
	    SAN='-fsanitize=address,undefined -fno-sanitize-recover=undefined' \
	    build/san/sluice build/san/tests/integration/test_http_hostile
	SLUICE_BIN=build/san/sluice HOSTILE_SEED=$(HOSTILE_SEED) HOSTILE_SECONDS=$(FUZZ_SECONDS) \
	    build/san/tests/integration/test_http_hostile

# ---- run, bench, install ------------------------------------------------

# The fixed-capacity HTTP upstream of the adaptive concurrency benchmark
# (tests/bench/capsrv.c, docs/adaptive.md): libuv only.
$(BUILD)/bench/capsrv: tests/bench/capsrv.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE $(shell pkg-config --cflags libuv) -o $@ $< $(shell pkg-config --libs libuv)

# ... and its open-loop load generator (tests/bench/aload.c).
$(BUILD)/bench/aload: tests/bench/aload.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE $(shell pkg-config --cflags libuv) -o $@ $< $(shell pkg-config --libs libuv)

run: deps $(BUILD)/sluice
	@tests/run-dev.sh $(BUILD)/sluice conf/sluice.ini

bench: deps deps-bench
	@$(MAKE) --no-print-directory $(BUILD)/sluice
	@tests/bench/bench.sh

# The quota store's capacity: decide-script calls a second per redis-server
# core, and through one sluice, strict and with a lease (docs/algorithms.md#capacity).
bench-store: deps
	@$(MAKE) --no-print-directory $(BUILD)/sluice
	@tests/bench/store.sh

# Redis's own Tcl suite, directly and through a 1:1 listener (tests/redis-suite.sh);
# SUITE_POOL=N runs the sluice half through a pooled listener (upstream_pool = N).
test-redis-suite: deps
	@$(MAKE) --no-print-directory $(BUILD)/sluice
	@tests/redis-suite.sh

# `make install` (PREFIX=/usr/local, DESTDIR for staging): the binary in
# PREFIX/bin, sluice(8) in MANDIR/man8, conf/sluice.ini as
# SYSCONFDIR/sluice/sluice.ini (SYSCONFDIR is /etc whatever PREFIX is: it is
# where sluice looks without -c; an existing file is kept and the example goes
# beside it as sluice.ini.example), deploy/systemd/sluice.service, when
# present, in UNITDIR with its /usr/bin/sluice changed to PREFIX/bin/sluice,
# and in DOCDIR what the configuration and the man page point to: README.md,
# docs/*.md and examples/ (conf/examples).
SYSCONFDIR ?= /etc
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/sluice
UNITDIR    ?= $(PREFIX)/lib/systemd/system
UNIT       := deploy/systemd/sluice.service
install: $(BUILD)/sluice
	install -D -m 0755 $(BUILD)/sluice $(DESTDIR)$(PREFIX)/bin/sluice
	install -D -m 0644 docs/sluice.8 $(DESTDIR)$(MANDIR)/man8/sluice.8
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/sluice/sluice.ini ]; then \
	    echo "install: keeping $(DESTDIR)$(SYSCONFDIR)/sluice/sluice.ini (the new one is sluice.ini.example)"; \
	    install -D -m 0644 conf/sluice.ini $(DESTDIR)$(SYSCONFDIR)/sluice/sluice.ini.example; \
	else install -D -m 0644 conf/sluice.ini $(DESTDIR)$(SYSCONFDIR)/sluice/sluice.ini; fi
	@if [ -e $(UNIT) ]; then \
	    mkdir -p $(DESTDIR)$(UNITDIR) && \
	    sed 's|/usr/bin/sluice|$(PREFIX)/bin/sluice|g' $(UNIT) > $(DESTDIR)$(UNITDIR)/sluice.service && \
	    chmod 0644 $(DESTDIR)$(UNITDIR)/sluice.service; \
	else echo "install: no $(UNIT) in this tree: no systemd unit installed"; fi
	install -D -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -d $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR)/examples
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	install -m 0644 conf/examples/* $(DESTDIR)$(DOCDIR)/examples/

# `make deb`: build/deb/sluice_VERSION_ARCH.deb (deploy/debian/build-deb.sh).
deb: $(BUILD)/sluice
	@deploy/debian/build-deb.sh $(BUILD) $(VERSION) $(BUILD)/deb

clean:
	rm -rf build

# ---- dependencies (Debian 12) -------------------------------------------

APT_GET = DEBIAN_FRONTEND=noninteractive apt-get
deps:
	@missing=; \
	command -v pkg-config >/dev/null || missing="$(DEB_BUILD)"; \
	for p in $(PKGS) $(TEST_PKGS); do pkg-config --exists $$p 2>/dev/null || missing="$(DEB_BUILD)"; done; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null || missing="$$missing redis-tools"; \
	if [ -n "$$missing" ]; then \
	    echo "deps: installing $$missing"; \
	    $(APT_GET) update -qq && $(APT_GET) install -y -qq $$missing >/dev/null || exit 1; \
	fi

deps-bench:
	@missing=; \
	command -v haproxy >/dev/null || missing="$$missing haproxy"; \
	command -v nutcracker >/dev/null || missing="$$missing nutcracker"; \
	[ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || missing="$$missing nginx-light libnginx-mod-stream"; \
	command -v redis-benchmark >/dev/null || missing="$$missing redis-tools"; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	pkg-config --exists openssl 2>/dev/null || missing="$$missing libssl-dev"; \
	if [ -n "$$missing" ]; then \
	    echo "deps: installing $$missing"; \
	    $(APT_GET) update -qq && $(APT_GET) install -y -qq $$missing >/dev/null || true; \
	fi

# What test_deploy needs beyond `deps`: python3 with PyYAML (the manifests).
deps-deploy:
	@python3 -c 'import yaml' 2>/dev/null || { \
	    echo "deps: installing python3 python3-yaml"; \
	    $(APT_GET) update -qq && $(APT_GET) install -y -qq python3 python3-yaml >/dev/null || exit 1; }

# What test_http needs beyond `deps`: nginx (the real upstream), curl and
# python3 (clients, and the test server for odd responses); node (Debian's
# nodejs) for test_http_upgrade's h2c upstream (Node's http2 module) and
# npm for test_http_paths (an Express upstream: it runs `npm install express`
# into build/node itself when that is missing).
deps-http:
	@missing=; \
	[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || missing="$$missing nginx-light"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v python3 >/dev/null || missing="$$missing python3"; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	    echo "deps: installing $$missing"; \
	    $(APT_GET) update -qq && $(APT_GET) install -y -qq $$missing >/dev/null || exit 1; \
	fi
