/* SPDX-License-Identifier: Apache-2.0 */
#include "hot.h"

GS_HIDDEN struct gs_hot gs_hot;
