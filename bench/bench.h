/* Benchmarks behind `rectrain bench NAME`. Each warms up, repeats, reports the median, prints
 * a table with the machine's measured ceiling beside the figure, and with --json ends with
 * one JSON object on stdout. */
#ifndef RECTRAIN_BENCH_H
#define RECTRAIN_BENCH_H

int bench_prep(int argc, char **argv);
int bench_train(int argc, char **argv);
int bench_embed(int argc, char **argv);

#endif
