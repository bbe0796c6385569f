/* The learning-rate schedule (the step graph itself is built by the compile driver's autodiff pass,
 * src/compile/step.c). */
#include "hp/train.h"

#include <math.h>

double hp_lr_at(const hp_optim_config *o, int64_t step, int64_t total) {
    if (o->warmup > 0 && step <= o->warmup) return o->lr * (double)step / (double)o->warmup;
    if (step >= total || total <= o->warmup) return o->min_lr;
    double progress = (double)(step - o->warmup) / (double)(total - o->warmup);
    return o->min_lr + 0.5 * (o->lr - o->min_lr) * (1.0 + cos(M_PI * progress));
}
