<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Exception;

/**
 * SidecarException is the base of every failure talking to the sidecar. Messages never
 * contain secrets, so callers may log them as they are.
 */
abstract class SidecarException extends \RuntimeException {
}
