<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Exception;

/**
 * BadSignatureException: a request that claims to come from the sidecar is not signed
 * with the shared secret (or its timestamp is too far off).
 */
class BadSignatureException extends \RuntimeException {
}
