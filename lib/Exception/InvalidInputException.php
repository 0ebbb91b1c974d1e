<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Exception;

/**
 * InvalidInputException is a request from the browser that the app refuses before asking
 * the sidecar (a malformed id, an unknown action). The OCS API answers 400
 * invalid_request with its message, so the message is plain language without internals.
 */
final class InvalidInputException extends \InvalidArgumentException {
}
