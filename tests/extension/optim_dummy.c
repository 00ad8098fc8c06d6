// optim_dummy.c — a deliberately minimal optimizer (plain SGD with a momentum buffer), used only
// by tests/check_add_optimizer.sh: copied into src/optim/ of a temporary copy of the tree to
// prove that adding an optimizer takes one file plus one registry line (and its declaration).
// Not a real optimizer of trainbench: it has no goldens, so test_optim fails for it by design.
// reference: torch.optim.SGD(momentum=beta1, dampening=0, nesterov=False), for-loop path
//   g' = g + weight_decay * p;  buf <- beta1 * buf + g'  (buf = g' at the first step);  p <- p - lr * buf
#include "optim/optim.h"

static void dummy_defaults(OptimConfig* c) {
    c->lr = 1e-3;
    c->beta1 = 0.9;
}

static Status dummy_validate(const OptimConfig* c) {
    Status s;
    if (!status_is_ok(s = optim_check_positive("lr", c->lr))) return s;
    if (!status_is_ok(s = optim_check_nonneg("weight_decay", c->weight_decay))) return s;
    return optim_check_beta("beta1", c->beta1);
}

static size_t dummy_state_bytes(const TensorShape* shape, const OptimConfig* c) { return 4 * shape_numel(shape); }

static OptimState* dummy_init(const TensorShape* shape, const OptimConfig* c) {
    OptimState* st = optim_state_new(&optim_dummy, sizeof(OptimState), shape);
    optim_state_add(st, "momentum_buffer", DTYPE_F32, *shape);
    return st;
}

static void dummy_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    float* buf = st->tensors[0].data;
    const float b1 = (float)c->beta1, lr = (float)c->lr, wd = (float)c->weight_decay;
    const size_t n = shape_numel(&st->shape);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * p[i];  // SGD's (coupled) weight decay
        buf[i] = st->step == 0 ? gi : b1 * buf[i] + gi;
        p[i] = p[i] - lr * buf[i];
    }
    st->step++;
}

const Optimizer optim_dummy = {
    .name = "dummy",
    .reference = "torch.optim.SGD with momentum (test extension only)",
    .defaults = dummy_defaults,
    .validate = dummy_validate,
    .state_bytes = dummy_state_bytes,
    .shared_state_bytes = NULL,
    .init = dummy_init,
    .step = dummy_step,
    .free = optim_state_free_tensors,
};
