/* learn_params.h — the choice lists of the learning knobs the strategies that learn share
 * (autoround, qat), in the order of plugin.h's enums, so that an ENUM value's index is the enum. */
#ifndef LMP_PLUGIN_LEARN_PARAMS_H
#define LMP_PLUGIN_LEARN_PARAMS_H

static const char *const learn_optimizer_choices[] = {"sign_sgd", "adam", NULL};            /* lmp_optimizer */
static const char *const learn_schedule_choices[] = {"constant", "linear", "cosine", NULL}; /* lmp_lr_schedule */

#endif
