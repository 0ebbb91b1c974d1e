<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Exception;

/**
 * AttachmentException says why a file shared in Talk was not copied into the bot's
 * storage. Its message is the "reason" the sidecar receives and may show the user, so it
 * is plain language without paths, ids or internals.
 */
final class AttachmentException extends \RuntimeException {
}
