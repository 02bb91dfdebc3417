# hsi — one GNU Makefile. `make` builds build/libhsi.a and build/hsi.
# CUDA objects are built when nvcc is found; CUDA=0 forces a CPU-only build.
# Sources are found by wildcard: a new .c/.cu in io/ kernels/ pipeline/
# models/ joins the library, a new cli/*.c the command, a new tests/*.c the
# test runner (suites and commands register themselves).

SHELL     := /bin/bash
NPROC     := $(shell nproc 2>/dev/null || echo 2)
BUILD     ?= build
PREFIX    ?= /usr/local
CC        ?= cc
OPT       ?= -O3 -march=native
PKGS      := openblas lapacke gdal matio libxml-2.0 zlib libcjson
TEST_PKGS := cunit

NVCC      ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),/usr/local/cuda)
CUDA_ARCH ?= sm_90
ifeq ($(CUDA),0)
  NVCC :=
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
TEST_LIBS  := $(shell pkg-config --libs $(TEST_PKGS) 2>/dev/null || echo -lcunit)

WARN    := -Wall -Wextra -Wno-format-truncation -Wno-unused-parameter -Wshadow=local
CFLAGS  ?= $(OPT) -g
override CFLAGS += -std=gnu11 -fPIC -pthread -fno-math-errno $(WARN) -MMD -MP -I. \
           $(PKG_CFLAGS)
LDLIBS  := $(PKG_LIBS) -lm -lpthread

LIB_DIRS := core io kernels pipeline models
LIB_C    := $(sort $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)))
LIB_CU   := $(sort $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.cu)))
CLI_C    := $(sort $(wildcard cli/*.c))
TEST_C   := $(sort $(wildcard tests/*.c))
FUZZ_C   := $(sort $(wildcard tests/fuzz/*.c))

ifneq ($(NVCC),)
  override CFLAGS += -DHSI_HAVE_CUDA=1 -I$(CUDA_HOME)/include
  NVFLAGS := -O3 -std=c++17 -Xcompiler -fPIC -DHSI_HAVE_CUDA=1 -I. \
             -gencode arch=compute_$(CUDA_ARCH:sm_%=%),code=$(CUDA_ARCH) \
             -gencode arch=compute_$(CUDA_ARCH:sm_%=%),code=compute_$(CUDA_ARCH:sm_%=%) \
             -MMD -MP
  LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lstdc++
  CU_OBJ  := $(LIB_CU:%.cu=$(BUILD)/%.cu.o)
  CUDA_MSG := CUDA $(CUDA_ARCH) via $(NVCC)
else
  CU_OBJ  :=
  CUDA_MSG := CPU only (no nvcc, or CUDA=0)
endif

LIB_OBJ  := $(LIB_C:%.c=$(BUILD)/%.o) $(CU_OBJ)
CLI_OBJ  := $(CLI_C:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_C:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libhsi.a
# The shared library: versioned soname (bump SOMAJOR when the ABI breaks).
SOMAJOR  := 0
SOVER    := $(SOMAJOR).1.0
SOLIB    := $(BUILD)/libhsi.so.$(SOVER)
BIN      := $(BUILD)/hsi
TESTBIN  := $(BUILD)/hsi_tests

.PHONY: all deps test test-cuda san fuzz demo bench install clean fixtures banner format

all: banner $(LIB) $(SOLIB) $(BIN)

banner:
	@echo "hsi build: $(CUDA_MSG); libraries: $(if $(PKG_LIBS),found ($(PKGS)),MISSING - run scripts/install-deps.sh)"

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SOLIB): $(LIB_OBJ)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libhsi.so.$(SOMAJOR) -o $@ $^ $(LDLIBS)
	ln -sf $(notdir $@) $(BUILD)/libhsi.so.$(SOMAJOR)
	ln -sf $(notdir $@) $(BUILD)/libhsi.so

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(LDLIBS)

$(TESTBIN): $(TEST_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $(TEST_OBJ) $(LIB) $(TEST_LIBS) $(LDLIBS)

deps:
	@bash scripts/install-deps.sh

# The whole suite; exit status = failures (see tests/runner.c).
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(TESTBIN)
	./$(TESTBIN) $(TESTS)

# CUDA suites only; fails when no device is present.
test-cuda: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(TESTBIN)
	./$(TESTBIN) --require-cuda cuda

# Address + undefined-behaviour sanitizers over the whole suite (CPU build).
san: deps
	@$(MAKE) --no-print-directory BUILD=build-san CUDA=0 OPT="-O1 -fno-omit-frame-pointer" \
	    CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    build-san/hsi_tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./build-san/hsi_tests $(TESTS)

# libFuzzer on every parser: each tests/fuzz/fuzz_*.c is one target.
FUZZ_SECONDS ?= 60
fuzz: deps
	@$(MAKE) --no-print-directory BUILD=build-fuzz CUDA=0 CC=clang \
	    CFLAGS="-O1 -g -fsanitize=fuzzer-no-link,address,undefined" build-fuzz/libhsi.a
	@set -e; for f in $(FUZZ_C); do n=$$(basename $$f .c); \
	  clang -O1 -g -fsanitize=fuzzer,address,undefined -I. $(PKG_CFLAGS) $$f \
	    build-fuzz/libhsi.a $(LDLIBS) -o build-fuzz/$$n; \
	  mkdir -p build-fuzz/corpus-$$n; \
	  seeds=$$(ls -d tests/fuzz/seeds-$$n 2>/dev/null || true); \
	  echo "fuzzing $$n for $(FUZZ_SECONDS) s"; \
	  ./build-fuzz/$$n -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 build-fuzz/corpus-$$n $$seeds; \
	done

demo: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@bash scripts/demo.sh

bench: all
	@bash bench/run.sh

# Regenerates every committed fixture with Debian's Python packages.
fixtures:
	@set -e; for f in tests/fixtures/make_*.py tests/malformed/make_*.py; do \
	  echo "/usr/bin/python3 $$f"; /usr/bin/python3 $$f; done

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include/hsi \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.h)) $(DESTDIR)$(PREFIX)/include/hsi/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBS@|$(LDLIBS)|' -e 's|@REQ@|$(PKGS)|' hsi.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/hsi.pc

format:
	clang-format -i $(LIB_C) $(CLI_C) $(TEST_C) $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.h))

clean:
	rm -rf build build-san build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
