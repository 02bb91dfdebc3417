# hsi — one GNU Makefile. `make` builds build/libhsi.a and build/hsi.
# CUDA objects are built when nvcc is found; CUDA=0 forces a CPU-only build.
# Sources are found by wildcard: a new .c/.cu in io/ kernels/ pipeline/
# models/ joins the library, a new cli/*.c the command, a new tests/*.c the
# test runner (suites and commands register themselves).

SHELL     := /bin/bash
NPROC     := $(shell nproc 2>/dev/null || echo 2)
# MPI=1 builds in build-mpi unless BUILD says otherwise (other objects)
BUILD     ?= $(if $(filter 1,$(MPI)),build-mpi,build)
PREFIX    ?= /usr/local
CC        ?= cc
# Any x86-64 with AVX2 and FMA (x86-64-v3); OPT=-march=native for this CPU
# only. The hand-written AVX2 kernels also check the CPU at run time.
OPT       ?= -O3 -march=x86-64-v3
# cairo: the run report's and profile's charts (io/plot.c); linked, not
# dlopened: it adds about 2 ms to start-up (hyperfine; GDAL adds far more)
PKGS      := openblas lapacke matio libxml-2.0 zlib libcjson cairo
# GDAL: headers at build time only; io/gdal_io.c dlopens GDAL_SONAME on the
# first GDAL format (nothing links -lgdal but hsi_tests, whose GDAL suites
# check hsi's files with GDAL itself). Not in hsi.pc's Requires.private.
GDAL_PKG  := gdal
TEST_PKGS := cunit

MPI_BUILD ?= build-mpi
NVCC      ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),/usr/local/cuda)
CUDA_ARCH ?= sm_90
# the NCCL plugin of an MPI build needs nvcc even with CUDA=0 (NCCL=0: none)
NCCL_NVCC := $(if $(filter 0,$(NCCL)),,$(NVCC))
ifeq ($(CUDA),0)
  NVCC :=
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) $(GDAL_PKG) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --exists $(GDAL_PKG) && pkg-config --libs $(PKGS) 2>/dev/null)
TEST_LIBS  := $(shell pkg-config --libs $(TEST_PKGS) 2>/dev/null || echo -lcunit) \
              $(shell pkg-config --libs $(GDAL_PKG) 2>/dev/null)
# the soname of the development libgdal.so (the one the headers belong to)
GDAL_SONAME ?= $(or $(shell for f in "$$(pkg-config --variable=libdir $(GDAL_PKG) 2>/dev/null)/libgdal.so" \
                   "$$($(CC) -print-file-name=libgdal.so)"; do [ -e "$$f" ] && \
                   objdump -p "$$f" 2>/dev/null | awk '/SONAME/ {print $$2; exit}' && break; done),libgdal.so)

WARN    := -Wall -Wextra -Wno-format-truncation -Wno-unused-parameter -Wshadow=local
CFLAGS  ?= $(OPT) -g
override CFLAGS += -std=gnu11 -fPIC -pthread -fno-math-errno $(WARN) -MMD -MP -I. \
           $(PKG_CFLAGS)
LDLIBS  := $(PKG_LIBS) -lm -lpthread
$(BUILD)/io/gdal_io.o: override CFLAGS += -DHSI_GDAL_SONAME='"$(GDAL_SONAME)"'

# MPI=1: core/dist.c is compiled over Open MPI (pkg-config ompi-c, else
# mpicc --showme) and every program links libmpi, for `mpirun -np N hsi`.
# The default build has no MPI header or library: core/dist.c is then the
# one-rank implementation of the same calls.
ifeq ($(MPI),1)
  MPI_PKG    ?= ompi-c
  MPI_CFLAGS := $(shell pkg-config --cflags $(MPI_PKG) 2>/dev/null || mpicc --showme:compile 2>/dev/null)
  MPI_LIBS   := $(shell pkg-config --libs $(MPI_PKG) 2>/dev/null || mpicc --showme:link 2>/dev/null)
  MPI_MSG    := MPI via $(if $(MPI_LIBS),$(MPI_LIBS),NOTHING FOUND - run HSI_MPI=1 scripts/install-deps.sh)
  $(BUILD)/core/dist.o: override CFLAGS += -DHSI_MPI=1 $(MPI_CFLAGS)
  $(BUILD)/tests/mpi/%.o: override CFLAGS += -DHSI_MPI=1 $(MPI_CFLAGS)
  LDLIBS     += $(MPI_LIBS)
  MPI_BINS   := $(BUILD)/hsi_dist_check
  # NCCL for device gradients: its own small plugin (core/nccl/*.cu, not
  # the CUDA plugin), built where nvcc and nccl.h are found; libhsi
  # dlopens it on the first hsi_nccl_open
  NCCL_H     := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
  ifneq ($(and $(NCCL_NVCC),$(NCCL_H)),)
    MPI_BINS += $(BUILD)/libhsi_nccl.so
    MPI_MSG  += with NCCL ($(NCCL_H))
  endif
else
  MPI_MSG    := one process (MPI=1 for mpirun)
  MPI_BINS   :=
endif

LIB_DIRS := core io kernels pipeline models
LIB_C    := $(sort $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)))
LIB_CU   := $(sort $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.cu)))
CLI_C    := $(sort $(wildcard cli/*.c))
TEST_C   := $(sort $(wildcard tests/*.c))
FUZZ_C   := $(sort $(wildcard tests/fuzz/*.c))

# CUDA lives in a plugin, $(BUILD)/libhsi_cuda.so (every *.cu), that libhsi
# dlopens on the first device request (core/cuda_runtime.c): libhsi, hsi and
# hsi_tests are the same with or without nvcc and link no CUDA library. The
# plugin leaves libhsi's core functions undefined: programs that link
# libhsi.a export them (-rdynamic); libhsi.so provides them itself.
LDLIBS  += -ldl
ifneq ($(NVCC),)
  NVFLAGS := -O3 -lineinfo -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden -I. \
             -gencode arch=compute_$(CUDA_ARCH:sm_%=%),code=$(CUDA_ARCH) \
             -gencode arch=compute_$(CUDA_ARCH:sm_%=%),code=compute_$(CUDA_ARCH:sm_%=%) \
             -MMD -MP
  CU_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lstdc++ -lpthread
  CU_OBJ  := $(LIB_CU:%.cu=$(BUILD)/%.cu.o)
  CU_PLUGIN := $(BUILD)/libhsi_cuda.so
  CUDA_MSG := CUDA $(CUDA_ARCH) via $(NVCC), as the plugin $(CU_PLUGIN)
else
  CU_OBJ  :=
  CU_PLUGIN :=
  CUDA_MSG := CPU only (no nvcc, or CUDA=0): no CUDA plugin
endif

LIB_OBJ  := $(LIB_C:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_C:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_C:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libhsi.a
# The shared library: versioned soname (bump SOMAJOR when the ABI breaks).
SOMAJOR  := 0
SOVER    := $(SOMAJOR).1.0
SOLIB    := $(BUILD)/libhsi.so.$(SOVER)
BIN      := $(BUILD)/hsi
TESTBIN  := $(BUILD)/hsi_tests

.PHONY: all deps test test-mpi test-cuda test-python python san fuzz demo bench install install-check clean fixtures banner format

all: banner $(LIB) $(SOLIB) $(BIN) $(CU_PLUGIN) $(MPI_BINS)

banner:
	@echo "hsi build: $(CUDA_MSG); $(MPI_MSG); libraries: $(if $(PKG_LIBS),found ($(PKGS)),MISSING - run scripts/install-deps.sh)"

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

# The CUDA plugin: hidden visibility (calls inside bind to its own
# functions, not to libhsi's forwarders of the same names), one exported
# entry point; libhsi's core symbols stay undefined (taken from the host
# process, see core/cuda_host.c), so no --no-undefined and no libhsi here.
$(BUILD)/libhsi_cuda.so: $(CU_OBJ)
	$(CC) -shared -Wl,-soname,libhsi_cuda.so -Wl,-Bsymbolic -o $@ $^ $(CU_LIBS)
	@missing=$$(nm -D --undefined-only $@ | awk '$$2 ~ /^hsi_/ {print $$2}' | \
	    while read -r s; do grep -qw "$$s" core/cuda_host.c kernels/cuda_stub.c || echo "$$s"; done); \
	if [ -n "$$missing" ]; then rm -f $@; \
	    echo "libhsi_cuda.so needs libhsi symbols not kept by core/cuda_host.c or kernels/cuda_stub.c:" $$missing; exit 1; fi

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS) -rdynamic -o $@ $(CLI_OBJ) $(LIB) $(LDLIBS)

# the tests run this build's own hsi (make san: the sanitized one)
$(TEST_OBJ): override CFLAGS += -DHSI_BIN='"./$(BIN)"'

$(TESTBIN): $(TEST_OBJ) $(LIB)
	$(CC) $(CFLAGS) -rdynamic -o $@ $(TEST_OBJ) $(LIB) $(TEST_LIBS) $(LDLIBS)

deps:
	@$(if $(filter 1,$(MPI)),HSI_MPI=1 )bash scripts/install-deps.sh

# The NCCL plugin: one .cu, linked with libnccl and cudart (rpath).
$(BUILD)/libhsi_nccl.so: core/nccl/dist_nccl.cu core/dist_nccl.h
	@mkdir -p $(dir $@)
	$(NCCL_NVCC) -O2 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden -I. -shared -o $@ $< \
	    -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64 -lnccl -lcudart

# The MPI checks (tests/mpi/dist_check.c under mpirun) that the dist
# suites run; only built with MPI=1.
$(BUILD)/hsi_dist_check: $(BUILD)/tests/mpi/dist_check.o $(LIB)
	$(CC) $(CFLAGS) -rdynamic -o $@ $< $(LIB) $(LDLIBS)

# The MPI build and its suites: mpirun --oversubscribe -np 1..4 of
# hsi_dist_check and of hsi commands (batch, train), each under a timeout.
test-mpi:
	@HSI_MPI=1 bash scripts/install-deps.sh
	@$(MAKE) --no-print-directory -j$(NPROC) MPI=1 CUDA=0 BUILD=$(MPI_BUILD) all $(MPI_BUILD)/hsi_tests
	./$(MPI_BUILD)/hsi_tests dist

# The whole suite; exit status = failures (see tests/runner.c).
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(TESTBIN)
	./$(TESTBIN) $(TESTS)
	$(if $(TESTS),,@bash scripts/install-check.sh)
	$(if $(TESTS),,@$(MAKE) --no-print-directory test-python)

# The Python package (python/): libhsi.so (and the CUDA plugin) copied into
# it, installed into a venv over Debian's Python packages.
PYVENV ?= $(BUILD)/venv
python: all
	@rm -rf python/hsi/_lib python/build && mkdir -p python/hsi/_lib # build/: setuptools' copy, else a stale plugin ships
	cp -L $(BUILD)/libhsi.so.$(SOMAJOR) $(CU_PLUGIN) python/hsi/_lib/
	@[ -x $(PYVENV)/bin/python ] || /usr/bin/python3 -m venv --system-site-packages $(PYVENV)
	$(PYVENV)/bin/python -m pip install -q --no-build-isolation --no-deps --force-reinstall ./python

# The package's pytest suite (needs numpy and pytest under /usr/bin/python3:
# python3-numpy, python3-pytest; skipped with a line when absent).
test-python:
	@if /usr/bin/python3 -c 'import numpy, pytest' 2>/dev/null; then \
	    $(MAKE) --no-print-directory python && \
	    cd python && HSI_BUILD=../$(BUILD) ../$(PYVENV)/bin/python -m pytest -q -p no:cacheprovider tests; \
	else echo "test-python: skipped (needs python3-numpy and python3-pytest)"; fi

# CUDA suites only; fails when no device is present.
test-cuda: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(TESTBIN)
	./$(TESTBIN) --require-cuda cuda

# Address + undefined-behaviour sanitizers over the whole suite (CPU build),
# the hsi the CLI and training suites run included (build-san/hsi), then the
# Python package's suite over the sanitized libhsi.so (leak checks off: the
# interpreter's own allocations are not ours).
san: deps
	@$(MAKE) --no-print-directory -j$(NPROC) BUILD=build-san CUDA=0 OPT="-O1 -fno-omit-frame-pointer" \
	    CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    build-san/hsi build-san/hsi_tests build-san/libhsi.so.$(SOVER)
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	    UBSAN_OPTIONS=print_stacktrace=1 ./build-san/hsi_tests $(TESTS)
	@# the Python package over the sanitized libhsi.so (lifetimes, handles, bad arguments)
	@if [ -z "$(TESTS)" ] && /usr/bin/python3 -c 'import numpy, pytest' 2>/dev/null; then \
	    cd python && LD_PRELOAD=$$($(CC) -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \
	    UBSAN_OPTIONS=print_stacktrace=1 HSI_LIBRARY=../build-san/libhsi.so.$(SOMAJOR) HSI_BUILD=../build-san \
	    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests; fi

# libFuzzer on every parser: each tests/fuzz/fuzz_*.c is one target, seeded
# with tests/fuzz/seeds-NAME/ and the ../shared/data folders listed in
# tests/fuzz/seeds-NAME.shared (real files, used where they are present).
# One request over 1.5 GiB fails (malloc returns NULL, as under ulimit -v)
# instead of stopping the run: libhdf5, behind the v7.3 reader, allocates
# sizes a damaged file records (two such files are regression seeds; the
# reader refuses them before libhdf5 sees them). Our code must then report
# "out of memory"; a process whose memory grows past 2 GiB still fails.
FUZZ_SECONDS ?= 60
FUZZ_ASAN := allocator_may_return_null=1:max_allocation_size_mb=1536
fuzz: deps
	@HSI_DEPS_EXTRA=clang bash scripts/install-deps.sh
	@# libFuzzer's runtime (its own package since clang 14 on Debian)
	@v=$$(clang -dumpversion | cut -d. -f1); HSI_DEPS_EXTRA="libclang-rt-$$v-dev" \
	    bash scripts/install-deps.sh 2>/dev/null || true
	@$(MAKE) --no-print-directory -j$(NPROC) BUILD=build-fuzz CUDA=0 CC=clang \
	    CFLAGS="-O1 -g -fsanitize=fuzzer-no-link,address,undefined" build-fuzz/libhsi.a
	@set -e; for f in $(FUZZ_C); do n=$$(basename $$f .c); \
	  clang -O1 -g -fsanitize=fuzzer,address,undefined -I. $(PKG_CFLAGS) $$f \
	    build-fuzz/libhsi.a $(LDLIBS) -o build-fuzz/$$n; \
	  mkdir -p build-fuzz/corpus-$$n; \
	  seeds=$$(ls -d tests/fuzz/seeds-$$n 2>/dev/null || true); \
	  for d in $$(cat tests/fuzz/seeds-$$n.shared 2>/dev/null); do \
	    [ -d ../shared/data/$$d ] && seeds="$$seeds ../shared/data/$$d"; done; \
	  echo "fuzzing $$n for $(FUZZ_SECONDS) s"; \
	  ASAN_OPTIONS=$(FUZZ_ASAN) ./build-fuzz/$$n -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    build-fuzz/corpus-$$n $$seeds; \
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

# Public headers: every header of the library's folders but the private
# ones below; installed in their folders, plus hsi/hsi.h that includes all.
PRIVATE_H := core/cuda_plugin.h core/dist_nccl.h kernels/cuda_internal.h kernels/kern_internal.h \
             pipeline/run_internal.h models/ops_kern.h models/tensor_impl.h \
             kernels/cuda_ops.h models/cuda_ops.h pipeline/cuda_ops.h kernels/tiles512.h \
             kernels/fastdiv.h kernels/tile_plan.h models/cuda_index.h
PUBLIC_H  := $(filter-out $(PRIVATE_H),$(sort $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.h))))
INC       := $(DESTDIR)$(PREFIX)/include/hsi

$(BUILD)/hsi.h: Makefile
	@mkdir -p $(dir $@)
	@{ echo "/* hsi.h — every public header of libhsi (generated by make install). */"; \
	   echo "#ifndef HSI_HSI_H"; echo "#define HSI_HSI_H"; \
	   for h in $(PUBLIC_H); do echo "#include \"$$h\""; done; echo "#endif"; } > $@

install: all $(BUILD)/hsi.h
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin \
	    $(foreach d,$(LIB_DIRS),$(INC)/$(d))
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SOLIB) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(notdir $(SOLIB)) $(DESTDIR)$(PREFIX)/lib/libhsi.so.$(SOMAJOR)
	ln -sf $(notdir $(SOLIB)) $(DESTDIR)$(PREFIX)/lib/libhsi.so
	$(if $(CU_PLUGIN),install -m 755 $(CU_PLUGIN) $(DESTDIR)$(PREFIX)/lib/)
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/
	for h in $(PUBLIC_H); do install -m 644 $$h $(INC)/$$h || exit 1; done
	install -m 644 $(BUILD)/hsi.h $(INC)/hsi.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBS@|$(LDLIBS)|' -e 's|@REQ@|$(PKGS)|' \
	    -e 's|@VERSION@|$(SOVER)|' hsi.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/hsi.pc

# Installs into a temporary prefix and builds and runs the README's C
# examples against it with plain pkg-config (shared library), and once
# statically.
install-check: all
	@bash scripts/install-check.sh

format:
	clang-format -i $(LIB_C) $(CLI_C) $(TEST_C) $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.h))

clean:
	rm -rf build build-san build-fuzz build-mpi

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
