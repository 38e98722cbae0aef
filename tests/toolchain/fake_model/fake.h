/* A stand-in for a generated <name>.h: the contract the verification harness builds against. */
#ifndef TINYAOT_FAKE_MODEL_H
#define TINYAOT_FAKE_MODEL_H

#include <stdint.h>

#define TINYAOT_FAKE_INPUT_SIZE 37
#define TINYAOT_FAKE_OUTPUT_SIZE 37
#define TINYAOT_FAKE_ARENA_SIZE 100
/* The model writes arena bytes FAKE_ARENA_OFFSET .. FAKE_ARENA_OFFSET + INPUT_SIZE - 1 and no others. */
#define FAKE_ARENA_OFFSET 10

extern int8_t tinyaot_fake_arena[TINYAOT_FAKE_ARENA_SIZE];
int tinyaot_fake_invoke(const int8_t *input, int8_t *output);

#endif
