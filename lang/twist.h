#pragma once
// The DSL in one include: what a program needs to define its inputs, funcs and monoids.
#include "lang/error.h"
#include "lang/expr.h"
#include "lang/func.h"
#include "lang/graph.h"
#include "lang/input.h"
#include "lang/monoid.h"
#include "lang/param.h"
#include "lang/types.h"
#include "lang/var.h"
