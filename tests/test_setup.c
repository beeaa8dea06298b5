/* The Makefile's set-up path (README's first two commands): under `make -j` CMake configures
 * only after scripts/install-deps.sh has finished, and a failed or interrupted configure is run
 * again, from a clean cache, by the next make, for `build` and `test-asan` alike.
 *
 * Most cases run the real Makefile, copied into a scratch folder, against two stand-ins put on
 * PATH and in scripts/: an install-deps.sh that takes a second and then marks the dependencies
 * installed, and a cmake that behaves as CMake does in the ways the Makefile relies on (a failed
 * configure leaves CMakeCache.txt, holding the options it was given, and no Makefile; a cached
 * compiler that does not exist fails every later configure; `--build` without a Makefile fails).
 * The last case checks those behaviours of the real CMake on this project's own CMakeLists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static char tmp[256], out[1 << 14];

static const char *stub_cmake =
    "#!/bin/sh\n"
    "if [ \"$1\" = --build ]; then\n"
    "    [ -f \"$2/Makefile\" ] || { echo \"gmake: No rule to make target 'Makefile'\" >&2; exit 2; }\n"
    "    touch \"$2/built\"; exit 0\n"
    "fi\n"
    "dir=$4; shift 4\n" /* configure: cmake -S . -B DIR OPTIONS */
    "mkdir -p \"$dir/CMakeFiles\"; touch \"$dir/CMakeCache.txt\"\n"
    "for a; do echo \"$a\" >>\"$dir/CMakeCache.txt\"; done\n"
    "if grep -q '^-DCMAKE_C_COMPILER=/nonexistent' \"$dir/CMakeCache.txt\"; then\n"
    "    echo 'The C compiler /nonexistent/cc is not able to compile' >&2; exit 1\n"
    "fi\n"
    "[ -f deps.done ] || { echo 'Could NOT find DNNL_INCLUDE' >&2; exit 1; }\n"
    "echo configured >>configures\n"
    "echo 'all:' >\"$dir/Makefile\"\n"
    /* Interrupted while generating: Ctrl-C reaches the whole process group, make included. */
    "if [ -n \"${STUB_INTERRUPT:-}\" ]; then kill -INT 0; sleep 5; fi\n";

static const char *stub_deps = "#!/bin/sh\nsleep 1\ntouch deps.done\n";

static void write_file(const char *name, const char *text, int mode) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    FILE *f = fopen(p, "w");
    if (!f) {
        perror(p);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    chmod(p, mode);
}

static int exists(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    return access(p, F_OK) == 0;
}

/* Runs `cmd` in a shell in the scratch folder with the stand-ins first on PATH; returns its exit
 * status, with stdout and stderr in `out`. */
static int sh(const char *cmd) {
    char full[2048];
    snprintf(full, sizeof full, "cd %s && PATH=%s/bin:$PATH; export PATH; %s 2>&1", tmp, tmp, cmd);
    return check_capture(full, out, sizeof out);
}

/* A scratch copy of the Makefile with the stand-ins, nothing installed and nothing configured. */
static void fresh(const char *root) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf %s/* && mkdir -p %s/bin %s/scripts && cp '%s/Makefile' %s/", tmp, tmp, tmp,
             root, tmp);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot set up %s\n", tmp);
        exit(1);
    }
    write_file("bin/cmake", stub_cmake, 0755);
    write_file("bin/ctest", "#!/bin/sh\nexit 0\n", 0755);
    write_file("scripts/install-deps.sh", stub_deps, 0755);
}

int main(void) {
    const char *root = getenv("REC_SOURCE_DIR");
    if (!root || !*root) root = ".";
    snprintf(tmp, sizeof tmp, "/tmp/rec_setup_XXXXXX");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }

    /* 1. -j2 on a machine missing a dependency: configure waits for install-deps. */
    fresh(root);
    CHECK(sh("make -j2 build") == 0 && exists("build/built"), "make -j2 build with deps missing: %s", out);
    fresh(root);
    CHECK(sh("make -j2 test-asan") == 0 && exists("build-asan/built"), "make -j2 test-asan with deps missing: %s",
          out);

    /* 2. A configure that failed (a compiler that does not exist, cached) does not stick. */
    fresh(root);
    CHECK(sh("touch deps.done && cmake -S . -B build -DCMAKE_C_COMPILER=/nonexistent/cc") == 1 &&
              exists("build/CMakeCache.txt") && !exists("build/Makefile"),
          "the stand-in's failed configure: %s", out);
    CHECK(sh("make -j2 build") == 0 && exists("build/built"), "make -j2 build after a failed configure: %s", out);
    CHECK(sh("make -j2 build") == 0 && sh("wc -l <configures") == 0 && atoi(out) == 1,
          "a configured build folder is not configured again: %s configures", out);
    fresh(root);
    CHECK(sh("touch deps.done && cmake -S . -B build-asan -DCMAKE_C_COMPILER=/nonexistent/cc") == 1,
          "the stand-in's failed configure (asan): %s", out);
    CHECK(sh("make -j2 test-asan") == 0 && exists("build-asan/built"), "make -j2 test-asan after a failed configure: %s",
          out);

    /* 3. A configure interrupted (Ctrl-C) after the Makefile was written is run again. */
    fresh(root);
    CHECK(sh("STUB_INTERRUPT=1 setsid -w make build") != 0 && !exists("build/Makefile"),
          "make deletes the sentinel of an interrupted configure: %s", out);
    CHECK(sh("make build") == 0 && exists("build/built"), "make build after an interrupted configure: %s", out);

    /* 4. The real CMake on this project: a failed configure leaves a cache and no Makefile, and
     *    the Makefile's configure rule recovers from it. */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && cmake -S . -B %s/real -DCMAKE_C_COMPILER=/nonexistent/cc >/dev/null 2>&1",
             root, tmp);
    CHECK(WEXITSTATUS(system(cmd)) != 0 && exists("real/CMakeCache.txt") && !exists("real/Makefile"),
          "real CMake: a failed configure leaves CMakeCache.txt and no Makefile");
    snprintf(cmd, sizeof cmd, "cd '%s' && make BUILD=%s/real %s/real/Makefile >%s/real.log 2>&1", root, tmp, tmp, tmp);
    CHECK(WEXITSTATUS(system(cmd)) == 0 && exists("real/Makefile"),
          "real CMake: make configures again after the failed configure (see %s/real.log)", tmp);

    if (!check__failed) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    }
    return check_report();
}
