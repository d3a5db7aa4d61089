// fault_around.c — how much one page fault maps of a file (BENCHMARKS.md §10b): a program that
// prints a figure, not a test. Maps the first 8 MB of FILE (paird's binary, say; read it once
// first so that its pages are in the page cache), gives it an madvise() advice (-1: none;
// 1: MADV_RANDOM, 2: MADV_SEQUENTIAL), reads one byte every 128 kB (64 reads) and prints how much
// VmRSS grew: 4 kB per read if a fault maps one page, 64 kB if the kernel's fault-around maps
// the 64 kB around it.
//   cc -O1 -o /tmp/fault_around Tests/bench/fault_around.c && cat FILE >/dev/null && /tmp/fault_around FILE -1
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static long rss_kb(void) {
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2) { perror("statm"); exit(1); }
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s FILE ADVICE (-1 none, 1 random, 2 sequential)\n", argv[0]); return 64; }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror(argv[1]); return 1; }
    size_t n = 8 << 20;
    if (lseek(fd, 0, SEEK_END) < (off_t)n) { fprintf(stderr, "%s: shorter than 8 MB\n", argv[1]); return 1; }
    char *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    int advice = atoi(argv[2]);
    if (advice >= 0 && madvise(p, n, advice) != 0) { perror("madvise"); return 1; }
    long before = rss_kb();
    volatile char sum = 0;
    for (int i = 0; i < 64; i++) sum += p[(size_t)i * 131072];
    printf("advice %d: 64 reads 128 kB apart: VmRSS +%ld kB (%ld kB per read)\n", advice, rss_kb() - before,
           (rss_kb() - before) / 64);
    return 0;
}
