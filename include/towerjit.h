// towerjit: the one header a user includes.
#pragma once

#include "dsl/autodiff.h"
#include "dsl/collectives.h"
#include "dsl/devices.h"
#include "dsl/ema.h"
#include "dsl/error.h"
#include "dsl/layers.h"
#include "dsl/ops.h"
#include "dsl/optimizers.h"
#include "dsl/schedules.h"
#include "dsl/state.h"
#include "dsl/towers.h"
#include "dsl/variables.h"
#include "jit/reference/interpreter.h"
#include "runtime/cpu/cpu_program.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/towers/tower_trainer.h"
