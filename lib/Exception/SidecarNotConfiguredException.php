<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Exception;

/**
 * SidecarNotConfiguredException means the app cannot even try: the shared secret is
 * missing or the sidecar URL is unusable. `occ istota:setup` fixes it.
 */
class SidecarNotConfiguredException extends SidecarException {
}
