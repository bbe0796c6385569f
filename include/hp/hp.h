/*
 * hp/hp.h — the whole public API of hyperparallel in one include.
 *
 * Build against an installed library with pkg-config (see README, "Installing the library"):
 *
 *     cc -std=c17 app.c $(pkg-config --cflags --libs hyperparallel)            # shared library
 *     cc -std=c17 app.c $(pkg-config --static --cflags --libs hyperparallel)   # static library
 *
 *     #include <hp/hp.h>
 *     hp_graph *g = hp_graph_new();
 *     hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(8, 4));
 *     hp_tid w = hp_param(g, "w", HP_SHAPE(4, 4));
 *     hp_tid y = hp_matmul(g, x, w, false, false);        // then hp_program_new / hp_program_run
 *
 * Every header below documents its own functions (shapes, units, errors, ownership). The library
 * version is HP_VERSION_MAJOR.HP_VERSION_MINOR.HP_VERSION_PATCH; the shared library's SONAME
 * carries the major number (libhyperparallel.so.0). hp/comm_mpi.h is declared always; its
 * functions exist when the library was built with the MPI communicator (pkg-config's Cflags then
 * define HP_HAVE_MPI).
 */
#ifndef HP_HP_H
#define HP_HP_H

#define HP_VERSION_MAJOR 0
#define HP_VERSION_MINOR 1
#define HP_VERSION_PATCH 0

#include "hp/core.h"
#include "hp/rng.h"
#include "hp/yaml.h"
#include "hp/config.h"
#include "hp/ir.h"
#include "hp/ops.h"
#include "hp/moe.h"
#include "hp/liveness.h"
#include "hp/costmodel.h"
#include "hp/calibrate.h"
#include "hp/backend.h"
#include "hp/runtime.h"
#include "hp/trace.h"
#include "hp/store.h"
#include "hp/comm.h"
#include "hp/comm_mpi.h"
#include "hp/mesh.h"
#include "hp/redist_plan.h"
#include "hp/dtensor.h"
#include "hp/redistribute.h"
#include "hp/shard.h"
#include "hp/strategy.h"
#include "hp/compile.h"
#include "hp/instr.h"
#include "hp/worker.h"
#include "hp/tier.h"
#include "hp/copy_engine.h"
#include "hp/disk.h"
#include "hp/offload.h"
#include "hp/offload_plan.h"
#include "hp/schedule.h"
#include "hp/pipeline.h"
#include "hp/pipeline_plan.h"
#include "hp/nn.h"
#include "hp/generate.h"
#include "hp/train.h"
#include "hp/data.h"
#include "hp/tokenizer.h"
#include "hp/shards.h"
#include "hp/safetensors.h"
#include "hp/checkpoint.h"
#include "hp/run_dir.h"
#include "hp/fit.h"
#include "hp/eval.h"
#include "hp/hf.h"
#include "hp/rl.h"
#include "hp/multimodal.h"

#endif /* HP_HP_H */
